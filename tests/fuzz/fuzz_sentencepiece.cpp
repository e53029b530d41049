// Fuzz harness: SentencePiece model files through Strata's wrapper (data/tokenizer_sentencepiece.h,
// SentencePieceTokenizer over Debian's libsentencepiece), then the encoder on fuzzed text. The
// input's first 2 bytes (little-endian) are the text's length; the text follows, and the rest is
// the tokenizer.model (written to a scratch file). A model that loads encodes the text and decodes
// the ids, and every id is below vocab_size(). The contract of tests/fuzz/fuzz_contract.h (errors
// name the file).
// Reference: google/sentencepiece (sentencepiece_model.proto),
// megatron/core/tokenizers/text/libraries/sentencepiece_tokenizer.py, https://llvm.org/docs/LibFuzzer.html.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "data/tokenizer_sentencepiece.h"
#include "tests/fuzz/fuzz_contract.h"

STRATA_FUZZ_TARGET(sentencepiece) {
  if (size < 2) return;
  const size_t text_size = std::min<size_t>(data[0] | (static_cast<size_t>(data[1]) << 8), size - 2);
  const std::string text(reinterpret_cast<const char*>(data) + 2, text_size);
  const std::string path = (strata::fuzz::scratch_dir() / "tokenizer.model").string();
  strata::fuzz::write_input(path, data + 2 + text_size, size - 2 - text_size);
  strata::fuzz::check_contract(
      [&] {
        const strata::data::SentencePieceTokenizer tok(path, "SentencePieceTokenizer");
        const std::vector<int64_t> ids = tok.encode(text);
        for (int64_t id : ids)
          if (id < 0 || id >= tok.vocab_size())
            strata::fuzz::contract_broken("encode returned id " + std::to_string(id) + " outside the vocabulary");
        (void)tok.decode(ids);
      },
      path);
}
