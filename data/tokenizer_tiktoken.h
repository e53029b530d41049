// Megatron's TikTokenizer: a tiktoken Encoding built from Megatron's vocabulary JSON, with its
// special tokens in front of the vocabulary.
//   - The file is a JSON list [{"rank": k, "token_bytes": base64, "token_str": text}, …]: entry k
//     has rank k, entries 0..255 are the single bytes 0..255, no two entries have the same bytes.
//     Only the first vocab_size - num_special_tokens entries are read (the rest are cut off), and
//     the file must have that many. Entry k gets id k + num_special_tokens.
//   - Ids [0, num_special_tokens) are the special tokens: the given list (Megatron's seven
//     "<unk>" "<s>" "</s>" "<mask>" "<pad>" "<cls>" "<sep>" when none is given, and any list must
//     hold those seven), then "<SPECIAL_k>" fillers up to num_special_tokens. EOD is "</s>", BOS
//     "<s>"; vocab_size() is the whole vocabulary (131072 unless given, Megatron's default).
//   - encode = tiktoken's Encoding.encode(text, allowed_special="all"), Megatron-Core's text_to_ids:
//     the special tokens are found in the text first (leftmost; the longest where several start at
//     one place, where tiktoken's choice follows its hash map's order) and become their ids; the
//     text between them is split by the v1 or v2 regex, and each piece is its own id when the
//     piece is in the vocabulary, else byte-pair merged: the adjacent pair whose concatenated bytes
//     have the lowest rank merges first (leftmost among equals), until no pair is in the vocabulary.
//   - decode = tiktoken's decode: the ids' bytes (a special token's text for its id) joined, then
//     made valid UTF-8 (each ill-formed subpart one U+FFFD, bytes.decode("utf-8", "replace")).
// Input text that is not valid UTF-8 is repaired first, as Python's decode with "replace" would
// hand it to tiktoken. The regexes run on the Oniguruma-to-PCRE2 translation (data/onig_regex.h):
// \s is White_Space, as in the Rust regex crate under tiktoken's fancy-regex.
// Reference: Megatron-LM megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py
// (reload_mergeable_ranks, TikTokenTokenizer, _PATTERN_TIKTOKEN_V1/_V2, text_to_ids, ids_to_text),
// megatron/core/tokenizers/utils/build_tokenizer.py (the TikTokenizer branch) and the legacy
// megatron/training/tokenizer/tokenizer.py (CustomTikTokenizer, removed in 3257093930); openai/
// tiktoken src/lib.rs (CoreBPE::encode_native, byte_pair_encode, _byte_pair_merge, decode_bytes).
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace strata::data {

namespace hf {
class OnigRegex;
}

// Megatron's two patterns, as Megatron writes them (tiktoken's fancy-regex syntax, which these
// two share with Oniguruma).
std::string_view tiktoken_pattern_text(TiktokenPattern pattern);

class TikTokenizer final : public Tokenizer {
 public:
  struct Options {
    TiktokenPattern pattern = TiktokenPattern::v2;
    int64_t num_special_tokens = 1000;
    std::vector<std::string> special_tokens;  // empty: Megatron's seven
    int64_t vocab_size = 131072;              // the whole vocabulary, special tokens included
  };
  // The options from the config (data.tiktoken_*, data.tokenizer_special_tokens; model.vocab_size
  // when given).
  static Options options_of(const DataConfig& data, std::optional<int64_t> vocab_size);

  // Errors name the file and the entry ("$[300].token_bytes"), or the config field.
  TikTokenizer(const std::string& vocab_file, const Options& options);
  // The same from the file's contents (tests).
  static std::unique_ptr<TikTokenizer> from_string(const std::string& vocab_json, const Options& options,
                                                   const std::string& source = "<memory>");
  ~TikTokenizer() override;

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }
  int64_t eod() const override { return eos_; }
  std::optional<int64_t> bos() const override { return bos_; }
  std::string name() const override { return "TikTokenizer"; }
  int64_t pad() const { return pad_; }
  const std::vector<std::string>& special_tokens() const { return special_; }

  // The ids of one regex piece (not containing a special token): tiktoken's byte_pair_encode.
  void encode_piece(std::string_view piece, std::vector<int64_t>& ids) const;

 private:
  TikTokenizer() = default;
  void load(const std::string& vocab_json, const Options& options, const std::string& source);
  void set_special_tokens(const Options& options);
  // The id of these bytes in the vocabulary (not a special token), or -1.
  int64_t rank_of(std::string_view bytes) const;
  // The ordinary text between special tokens.
  void encode_ordinary(std::string_view text, std::vector<int64_t>& ids) const;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> ranks_;  // bytes → id (shifted)
  std::vector<std::string> id_to_bytes_;                                      // id → bytes (specials: their text)
  std::vector<std::string> special_;                                          // ids 0 .. num_special - 1
  std::array<std::vector<int64_t>, 256> special_by_first_byte_;               // longest first
  std::unique_ptr<hf::OnigRegex> regex_;
  int64_t eos_ = -1, pad_ = -1;
  std::optional<int64_t> bos_;
  mutable std::unordered_map<std::string, std::vector<int64_t>, Hash, std::equal_to<>> cache_;  // piece → ids
};

}  // namespace strata::data
