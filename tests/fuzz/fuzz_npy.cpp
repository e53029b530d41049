// Fuzz harness: the NPY reader (core/formats/npy.h, read_npy), which reads Megatron's cached GPT
// dataset indices (document_index, sample_index, shuffle_index .npy files): the input is written as
// a file and read; a value read must hold as many values as its shape says; the contract of
// tests/fuzz/fuzz_contract.h (errors name the file).
// Reference: numpy/lib/format.py (NPY format), https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>

#include "core/formats/npy.h"
#include "tests/fuzz/fuzz_contract.h"

STRATA_FUZZ_TARGET(npy) {
  const std::string path = (strata::fuzz::scratch_dir() / "fuzz_shuffle_index.npy").string();
  strata::fuzz::write_input(path, data, size);
  strata::fuzz::check_contract(
      [&] {
        const strata::formats::NpyArray a = strata::formats::read_npy(path);
        int64_t n = 1;
        for (int64_t d : a.shape) n *= d;
        if (n != static_cast<int64_t>(a.values.size()))
          strata::fuzz::contract_broken("an array whose values do not fill its shape was returned");
      },
      path);
}
