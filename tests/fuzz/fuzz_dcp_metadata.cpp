// Fuzz harness: a PyTorch distributed checkpoint's .metadata (core/formats/dcp_reader.h): the
// input is written as <scratch>/.metadata and read by DcpReader, then every item is read (a chunk
// whose file is absent is an error; one naming ".metadata" itself reads the input as its storage);
// the contract of tests/fuzz/fuzz_contract.h (errors name the scratch directory).
// Reference: torch/distributed/checkpoint/metadata.py, https://llvm.org/docs/LibFuzzer.html.
#include <cstddef>
#include <cstdint>

#include "core/formats/dcp_reader.h"
#include "tests/fuzz/fuzz_contract.h"

STRATA_FUZZ_TARGET(dcp_metadata) {
  const auto& dir = strata::fuzz::scratch_dir();
  strata::fuzz::write_input(dir / ".metadata", data, size);
  strata::fuzz::check_contract(
      [&] {
        strata::formats::DcpReader reader(dir.string());
        for (const auto& [fqn, item] : reader.items()) {
          if (!item.is_tensor) {
            reader.read_bytes(fqn);
            continue;
          }
          for (size_t i = 0; i < item.chunks.size(); ++i) reader.read_chunk(fqn, i);
        }
      },
      dir.string());
}
