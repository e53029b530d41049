// Tokenizers with Megatron's build_tokenizer semantics, text → token ids → text:
// ByteLevelTokenizer, GPT2BPETokenizer (byte-level BPE from vocab.json + merges.txt) and
// NullTokenizer (ids written as text) here; HuggingFaceTokenizer (data/tokenizer_hf.h), the
// SentencePiece types (data/tokenizer_sentencepiece.h) and TikTokenizer (data/tokenizer_tiktoken.h)
// beside them; StreamingDetokenizer, which
// prints ids as they come without splitting a character. Each class's comment gives its ids and EOD.
// Reference: Megatron-LM megatron/training/tokenizer/tokenizer.py (build_tokenizer,
// _GPT2BPETokenizer), megatron/core/tokenizers/text/libraries/null_tokenizer.py (NullTokenizer)
// and megatron/training/tokenizer/gpt2_tokenization.py (from openai/gpt-2 src/encoder.py:
// bytes_to_unicode, get_pairs, bpe).
// Use: build_tokenizer(TokenizerType::GPT2BPETokenizer, "vocab.json", "merges.txt")->encode(text).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/data_config.h"

namespace strata::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // Inverse of encode(); throws on an id outside [0, vocab_size()).
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;  // unpadded (Megatron pads it to make_vocab_size_divisible_by)
  virtual int64_t eod() const = 0;         // end-of-document id appended by `strata preprocess --append-eod`
  virtual std::string name() const = 0;    // "ByteLevelTokenizer", …
  virtual std::optional<int64_t> bos() const { return std::nullopt; }  // beginning-of-sequence id, if any
};

// Ids 0..255 are the UTF-8 bytes, EOD = 256, vocab_size = 257.
class ByteLevelTokenizer final : public Tokenizer {
 public:
  std::vector<int64_t> encode(std::string_view text) const override;
  // The EOD id decodes to nothing (it separates documents, it is not text).
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return 257; }
  int64_t eod() const override { return 256; }
  std::string name() const override { return "ByteLevelTokenizer"; }
};

// Ids written as text ("1 2 3"), vocab_size = N, EOD = N - 1 (current Megatron-Core's
// NullTokenizer(vocab_size): the EOD id is inside the vocabulary, so model.vocab_size = N holds
// every id it produces).
class NullTokenizer final : public Tokenizer {
 public:
  explicit NullTokenizer(int64_t vocab_size);  // ids 0 .. vocab_size - 1, EOD = vocab_size - 1
  // "1 2 3" → {1, 2, 3}: whitespace-separated decimal ids in [0, vocab_size()).
  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;  // {1, 2, 3} → "1 2 3"
  int64_t vocab_size() const override { return n_; }
  int64_t eod() const override { return n_ - 1; }
  std::string name() const override { return "NullTokenizer"; }

 private:
  int64_t n_;
};

// OpenAI GPT-2 byte-level BPE: the bytes_to_unicode map, the GPT-2 pre-tokenizer pattern (a
// hand-written scanner, data/tokenizer_gpt2.cpp), merges applied by rank; EOD is the id of
// "<|endoftext|>". Like Megatron's GPT2Tokenizer, "<|endoftext|>" inside the text is NOT special:
// it is encoded as ordinary text. encode() is not safe to call from several threads on one
// tokenizer (its BPE cache).
class GPT2BPETokenizer final : public Tokenizer {
 public:
  // vocab.json: {"token": id, …} over the bytes_to_unicode alphabet; merges.txt: an optional
  // "#version" line, then one "a b" merge per line in rank order. Errors name the file.
  GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file);
  // The same from the file contents (tests).
  static std::unique_ptr<GPT2BPETokenizer> from_strings(const std::string& vocab_json, const std::string& merges_txt,
                                                        const std::string& source = "<memory>");

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(decoder_.size()); }
  int64_t eod() const override { return eod_; }
  std::string name() const override { return "GPT2BPETokenizer"; }

  // BPE of one pre-token (its raw UTF-8 bytes): the merged symbols, each a UTF-8 string over the
  // bytes_to_unicode alphabet ("Ġworld").
  std::vector<std::string> bpe(std::string_view pretoken) const;

 private:
  GPT2BPETokenizer() = default;
  void load(const std::string& vocab_json, const std::string& merges_txt, const std::string& source);

  std::unordered_map<std::string, int64_t> encoder_;  // token → id
  std::vector<std::string> decoder_;                  // id → token
  std::unordered_map<std::string, int64_t> ranks_;    // "a b" → merge rank
  int64_t eod_ = -1;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;  // pre-token bytes → ids
};

// Megatron's build_tokenizer: the tokenizer named by data.tokenizer_type. GPT2BPETokenizer needs
// vocab_file and merge_file; HuggingFaceTokenizer (data/tokenizer_hf.h), the SentencePiece types
// (data/tokenizer_sentencepiece.h) and TikTokenizer (data/tokenizer_tiktoken.h) need tokenizer_model;
// NullTokenizer needs vocab_size (Megatron's --vocab-size: the whole vocabulary, EOD included),
// which TikTokenizer takes too (131072 without it, as Megatron).
std::unique_ptr<Tokenizer> build_tokenizer(const DataConfig& data, std::optional<int64_t> vocab_size = {});

// A model vocabulary (model.vocab_size, when set) smaller than the tokenizer's would meet ids
// outside the embedding; throws config::ConfigError naming model.vocab_size and the tokenizer's
// size. Called before anything is allocated (train, --validate-only, generate, export).
void check_vocab_fits(std::optional<int64_t> model_vocab_size, const Tokenizer& tokenizer);
// build_tokenizer(data, model_vocab_size) + check_vocab_fits.
std::unique_ptr<Tokenizer> build_checked_tokenizer(const DataConfig& data, std::optional<int64_t> model_vocab_size);

// Text of ids that arrive one at a time (generation): each push returns the text the ids so far
// add, holding back while the decoded text ends in U+FFFD (a character split across ids); finish()
// returns what is left. The pieces concatenate to tokenizer.decode(all ids) whenever decoding a
// suffix of ids gives a suffix of the text (every tokenizer here).
// Reference: huggingface/tokenizers tokenizers/src/tokenizer/mod.rs (DecodeStream, step_decode_stream).
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int64_t id);
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  std::vector<int64_t> ids_;  // from the start of the last emitted token on
  std::string prefix_;        // decode of ids_[0, prefix_index_)
  size_t prefix_index_ = 0;
};

// ---- GPT-2 building blocks (exposed for tests) --------------------------------------------------

// bytes_to_unicode(): byte b → the UTF-8 encoding of the printable code point GPT-2 maps it to
// (printable Latin-1 bytes map to themselves, the others to U+0100 + n in byte order: ' ' → "Ġ").
const std::array<std::string, 256>& gpt2_byte_encoder();
// The inverse: a code point of that alphabet → its byte, or -1.
int gpt2_byte_decode(uint32_t code_point);

// The GPT-2 pre-tokenizer:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Pieces are views into `text` and concatenate back to it. Ill-formed UTF-8 (each maximal subpart,
// data/utf8.h) is neither letter, number nor space (so random bytes still round-trip).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

// Unicode classes used by the pre-tokenizer (\p{L}, \p{N}, \s = White_Space).
bool unicode_is_letter(uint32_t cp);
bool unicode_is_number(uint32_t cp);
bool unicode_is_space(uint32_t cp);

}  // namespace strata::data
