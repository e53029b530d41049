// Megatron's HuggingFaceTokenizer from a `tokenizers` tokenizer.json: added tokens matched first
// (leftmost, then longest; non-normalized ones on the raw text, normalized ones after the
// normalizer), then normalizer, pre-tokenizer and BPE model per remaining piece, then the
// post-processor's template; decoding runs the decoder chain. The components are in
// data/tokenizer_hf_parts.h; anything else in the file is an error naming it and its JSON path.
// Input text that is not valid UTF-8 is repaired first (data/utf8.h: one U+FFFD per ill-formed
// subpart), as Python's bytes.decode("utf-8", "replace") would hand it to `tokenizers`.
// Reference: megatron/core/tokenizers/text/libraries/huggingface_tokenizer.py (text_to_ids:
// tokenizer(text).input_ids unless --tokenizer-hf-no-include-special-tokens; ids_to_text; eod =
// eos_token; vocab_size = len(tokenizer)); huggingface/tokenizers tokenizers/src/tokenizer/
// {mod.rs (encode, decode), added_vocabulary.rs}, processors/template.rs.
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace strata::data {

namespace hf {
class Normalizer;
class PreTokenizer;
class Decoder;
class BpeModel;
}  // namespace hf

class HuggingFaceTokenizer final : public Tokenizer {
 public:
  // `path`: a tokenizer.json or a directory holding one. The special tokens (eos_token → EOD,
  // bos_token, pad_token) come from tokenizer_config.json, else special_tokens_map.json, beside it,
  // where transformers' AutoTokenizer reads them. include_special_tokens = false is Megatron's
  // --tokenizer-hf-no-include-special-tokens: no template tokens when encoding, and special tokens
  // left out when decoding. Errors name the file (and the JSON path inside it).
  explicit HuggingFaceTokenizer(const std::string& path, bool include_special_tokens = true);
  // The same from file contents (tests); special_tokens_json is a tokenizer_config.json's text.
  static std::unique_ptr<HuggingFaceTokenizer> from_strings(const std::string& tokenizer_json,
                                                            const std::string& special_tokens_json,
                                                            const std::string& source = "<memory>",
                                                            bool include_special_tokens = true);
  ~HuggingFaceTokenizer() override;

  std::vector<int64_t> encode(std::string_view text) const override;
  // The decoder chain over the ids' tokens; lossy where the ids split a UTF-8 character.
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eod() const override { return eod_; }
  std::optional<int64_t> bos() const override { return bos_; }
  std::string name() const override { return "HuggingFaceTokenizer"; }
  std::optional<int64_t> token_to_id(const std::string& token) const;

  // The tokenizer files of a HuggingFaceTokenizer path that a checkpoint or an HF export keeps:
  // tokenizer.json and, where present, tokenizer_config.json and special_tokens_map.json.
  static std::vector<std::string> files_of(const std::string& path);

 private:
  HuggingFaceTokenizer();
  void load(const std::string& tokenizer_json, const std::string& special_tokens_json, const std::string& source,
            const std::string& special_tokens_source);

  struct AddedToken {
    std::string content;
    int64_t id;
    bool lstrip, rstrip, special;
  };
  // A byte range of a text, and the added token it is (-1: ordinary text).
  struct Segment {
    size_t begin, end;
    int64_t added;
  };
  std::vector<Segment> split_added(const std::string& text, bool normalized) const;

  std::vector<AddedToken> added_;
  std::array<std::array<std::vector<int>, 256>, 2> added_by_first_byte_;  // [normalized][byte] → longest first
  std::vector<std::string> id_to_added_;                                  // "" where none
  std::vector<bool> special_id_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::BpeModel> model_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::vector<int64_t> template_before_, template_after_;  // the post-processor's single template around $A
  bool include_special_tokens_ = true;
  int64_t vocab_size_ = 0;
  int64_t eod_ = -1;
  std::optional<int64_t> bos_;
};

}  // namespace strata::data
