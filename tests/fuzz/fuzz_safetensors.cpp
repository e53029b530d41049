// Fuzz harness: the safetensors reader (core/formats/safetensors.h): the input is written as a
// file and read by read_safetensors_header, then read_safetensors (header, offsets, dtypes, the
// tensors mapped or copied); the contract of tests/fuzz/fuzz_contract.h (errors name the file).
// Reference: huggingface/safetensors (format), https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>

#include "core/formats/safetensors.h"
#include "tests/fuzz/fuzz_contract.h"

STRATA_FUZZ_TARGET(safetensors) {
  const std::string path = (strata::fuzz::scratch_dir() / "fuzz.safetensors").string();
  strata::fuzz::write_input(path, data, size);
  strata::fuzz::check_contract([&] { strata::formats::read_safetensors_header(path); }, path);
  strata::fuzz::check_contract([&] { strata::formats::read_safetensors(path); }, path);
}
