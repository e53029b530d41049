// Megatron's SentencePiece tokenizers (SentencePieceTokenizer, GPTSentencePieceTokenizer,
// Llama2Tokenizer) from a `tokenizer.model`, through Debian's libsentencepiece. Megatron-Core builds
// all three names as one class (the legacy tokenizers that differed were removed): encode is
// sp.encode_as_ids(text) (no BOS, no EOS), decode sp.decode_ids, EOD the model's eos id, BOS and
// pad the model's own (absent when the model has none), vocab_size the piece count. Megatron's
// legacy options (--tokenizer-sentencepiece-legacy, --tokenizer-special-tokens, extra whitespace
// handling) are refused by name in the flag table. Input that is not valid UTF-8 is repaired first
// (data/utf8.h), as for HuggingFaceTokenizer.
// Reference: megatron/core/tokenizers/text/libraries/sentencepiece_tokenizer.py (legacy=False,
// ignore_extra_whitespaces=True), megatron/core/tokenizers/utils/build_tokenizer.py (SP_TOKENIZERS),
// abstract_tokenizer.py (eod = eos_id).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace strata::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // model_file: a SentencePiece model (tokenizer.model); type_name: the Megatron name it was built as.
  // A model without an EOS piece is an error (Megatron's EOD is the eos id).
  SentencePieceTokenizer(const std::string& model_file, std::string type_name);
  ~SentencePieceTokenizer() override;

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eod() const override { return eod_; }
  std::optional<int64_t> bos() const override { return bos_; }
  std::optional<int64_t> pad() const { return pad_; }
  std::string name() const override { return type_name_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string type_name_;
  int64_t vocab_size_ = 0, eod_ = -1;
  std::optional<int64_t> bos_, pad_;
};

}  // namespace strata::data
