// The components of a Hugging Face tokenizer.json (data/tokenizer_hf.h builds a tokenizer from
// them): the normalizers, pre-tokenizers, decoders and the BPE model, each built from its JSON
// object and failing with the file and JSON path of anything it does not implement. Regex
// patterns (Oniguruma syntax in `tokenizers`) are translated to PCRE2 (data/onig_regex.h), or
// refused by name. Normalization forms come from utf8proc.
// Reference: huggingface/tokenizers tokenizers/src/{normalizers,pre_tokenizers,decoders,models/bpe}
// and tokenizer/normalizer.rs (NormalizedString::split, SplitDelimiterBehavior).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/onig_regex.h"

namespace strata::data::hf {

using json = nlohmann::json;

// A JSON value with its file and its path inside it ("$.model.merges[3]"), so that every error
// names both.
class JsonNode {
 public:
  JsonNode(const json& value, std::string path, std::shared_ptr<const std::string> file)
      : value_(&value), path_(std::move(path)), file_(std::move(file)) {}
  [[noreturn]] void fail(const std::string& what) const;
  const json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return *file_; }
  bool is_null() const { return value_->is_null(); }
  JsonNode at(const std::string& key) const;                     // a required member
  std::optional<JsonNode> find(const std::string& key) const;    // absent or null: nullopt
  JsonNode at(size_t index) const;
  size_t size() const;                                           // of an array or object
  std::vector<std::pair<std::string, JsonNode>> members() const;  // of an object, in file order
  std::string str() const;
  bool boolean() const;
  int64_t integer() const;
  std::string type() const { return at("type").str(); }          // the component's "type"
  // find(key) as a string / bool, or `fallback` when absent.
  std::string str_or(const std::string& key, const std::string& fallback) const;
  bool bool_or(const std::string& key, bool fallback) const;

 private:
  const json* value_;
  std::string path_;
  std::shared_ptr<const std::string> file_;
};

// A compiled pattern: a "Regex" (Oniguruma syntax, run on PCRE2: data/onig_regex.h) or a
// "String" (a literal), as the {"Regex": …} / {"String": …} objects of Split and Replace hold.
class Pattern {
 public:
  explicit Pattern(const JsonNode& node);  // the {"Regex"|"String": text} object
  Pattern(const std::string& regex, const JsonNode& where);  // a built-in regex; errors name `where`
  ~Pattern();
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
  // The matches `tokenizers` finds (pattern.rs find_matches over onig's find_iter): left to right,
  // non-overlapping, empty matches included; none in an empty text. A regex that fails to match
  // (PCRE2's match limit) is an error naming the file, the JSON path and the text.
  std::vector<ByteRange> find_all(std::string_view text) const;

 private:
  void compile(const std::string& regex, const JsonNode& where);
  std::string literal_;
  std::unique_ptr<OnigRegex> regex_;  // null for a non-empty literal
  std::string source_, file_, path_;  // the regex and where it is, for matching errors
};

// A piece of text on its way to the model, and whether it starts the input text (Metaspace's
// prepend_scheme "first" prepends only there).
struct TextPiece {
  std::string text;
  bool at_text_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};
std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its pieces (empty ones are dropped).
  virtual void pre_tokenize(std::vector<TextPiece>& pieces) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node);

class Decoder {
 public:
  virtual ~Decoder() = default;
  // One step of the decoder chain: tokens in, tokens out (joined by the caller).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const JsonNode& node);

// The id tables are dense (one entry per id up to the largest), so ids must not leave most of their
// range unused: at most max(2 * `named`, named + 1024) ids for `named` tokens, else an error at
// `where` (a corrupt id such as 2^31 - 1 would otherwise ask for gigabytes from a small file).
void check_id_range(int64_t max_id, size_t named, const JsonNode& where);

// The BPE model: vocabulary, merges by rank (applied lowest rank first, leftmost first), unknown
// token (fused or not), byte fallback to <0xXX> tokens, ignore_merges, subword prefix/suffix.
class BpeModel {
 public:
  explicit BpeModel(const JsonNode& model);  // the "model" object, type "BPE"
  // Appends the ids of one pre-tokenized piece.
  void tokenize(std::string_view piece, std::vector<int64_t>& ids) const;
  std::optional<int64_t> token_to_id(const std::string& token) const;
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }  // "" for unused ids
  size_t size() const { return vocab_.size(); }                                  // the vocabulary's tokens

 private:
  void merge_word(std::string_view piece, std::vector<int64_t>& ids) const;
  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left id, right id) → (rank, new id)
  std::optional<int64_t> unk_id_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  std::vector<int64_t> byte_ids_;  // <0xXX> → id, or -1 when the vocabulary lacks it
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace strata::data::hf
