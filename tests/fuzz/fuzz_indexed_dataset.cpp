// Fuzz harness: Megatron's indexed dataset (core/formats/indexed_dataset.h, IndexedDataset): the
// input is split into `<prefix>.idx` and `<prefix>.bin` (its first 4 bytes, little-endian, are the
// .idx length; the .bin is what follows the .idx), both written to a scratch directory, opened, and
// every sequence, length, pointer and document index read; the contract of
// tests/fuzz/fuzz_contract.h (errors name the file).
// Reference: megatron/core/datasets/indexed_dataset.py (_IndexReader, IndexedDataset),
// https://llvm.org/docs/LibFuzzer.html.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/formats/indexed_dataset.h"
#include "tests/fuzz/fuzz_contract.h"

STRATA_FUZZ_TARGET(indexed_dataset) {
  if (size < 4) return;
  uint32_t idx_size = 0;
  std::memcpy(&idx_size, data, 4);
  const size_t idx_bytes = std::min<size_t>(idx_size, size - 4);
  const std::string prefix = (strata::fuzz::scratch_dir() / "fuzz_text_document").string();
  strata::fuzz::write_input(prefix + ".idx", data + 4, idx_bytes);
  strata::fuzz::write_input(prefix + ".bin", data + 4 + idx_bytes, size - 4 - idx_bytes);
  strata::fuzz::check_contract(
      [&] {
        const strata::formats::IndexedDataset ds(prefix);
        const std::vector<int32_t> lengths = ds.sequence_lengths();
        const std::vector<int64_t> documents = ds.document_indices();
        if (static_cast<int64_t>(lengths.size()) != ds.num_sequences() ||
            static_cast<int64_t>(documents.size()) != ds.num_documents() + 1)
          strata::fuzz::contract_broken("the lengths or document indices disagree with the counts");
        for (int64_t i = 0; i < ds.num_sequences(); ++i) {
          (void)ds.sequence_pointer(i);
          const std::vector<int64_t> tokens = ds.get(i);
          if (static_cast<int64_t>(tokens.size()) != ds.sequence_length(i))
            strata::fuzz::contract_broken("get(i) returned another length than sequence_length(i)");
          if (!tokens.empty()) (void)ds.get(i, static_cast<int64_t>(tokens.size()) - 1, 1);
        }
      },
      "fuzz_text_document");
}
