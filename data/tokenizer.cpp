// ByteLevelTokenizer, NullTokenizer and build_tokenizer (data/tokenizer.h); the GPT-2 BPE
// tokenizer is in data/tokenizer_gpt2.cpp, TikTokenizer in data/tokenizer_tiktoken.cpp.
// Reference: Megatron-LM megatron/training/tokenizer/tokenizer.py (build_tokenizer),
// megatron/core/tokenizers/text/libraries/null_tokenizer.py (NullTokenizer).
#include "data/tokenizer.h"

#include <cctype>
#include <charconv>

#include "core/error.h"
#include "data/tokenizer_hf.h"
#include "data/tokenizer_sentencepiece.h"
#include "data/tokenizer_tiktoken.h"
#include "data/utf8.h"

namespace strata::data {

// ---- ByteLevelTokenizer -------------------------------------------------------------------------

std::vector<int64_t> ByteLevelTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteLevelTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    STRATA_CHECK(id >= 0 && id < vocab_size(), "ByteLevelTokenizer.decode: id ", id, " is outside [0, ", vocab_size(),
                 ")");
    if (id == eod()) continue;
    out.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return out;
}

// ---- NullTokenizer ------------------------------------------------------------------------------

NullTokenizer::NullTokenizer(int64_t vocab_size) : n_(vocab_size) {
  STRATA_CHECK(n_ > 0, "NullTokenizer: vocab_size must be > 0, got ", n_);
}

std::vector<int64_t> NullTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    std::string_view word = text.substr(i, j - i);
    int64_t id = 0;
    auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    STRATA_CHECK(ec == std::errc() && end == word.data() + word.size(), "NullTokenizer.encode: '", word,
                 "' is not a decimal token id");
    STRATA_CHECK(id >= 0 && id < vocab_size(), "NullTokenizer.encode: id ", id, " is outside [0, ", vocab_size(), ")");
    ids.push_back(id);
    i = j;
  }
  return ids;
}

std::string NullTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    STRATA_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "NullTokenizer.decode: id ", ids[i], " is outside [0, ",
                 vocab_size(), ")");
    if (i) out.push_back(' ');
    out += std::to_string(ids[i]);
  }
  return out;
}

// ---- build_tokenizer ----------------------------------------------------------------------------

std::unique_ptr<Tokenizer> build_tokenizer(const DataConfig& data, std::optional<int64_t> vocab_size) {
  const std::optional<std::string>& vocab_file = data.vocab_file;
  const std::optional<std::string>& merge_file = data.merge_file;
  const std::string type_name(config::enum_to_string<TokenizerType>(kTokenizerTypeNames, data.tokenizer_type));
  if (tokenizer_uses_model_file(data.tokenizer_type))
    STRATA_CHECK(data.tokenizer_model.has_value() && !data.tokenizer_model->empty(), "build_tokenizer: ", type_name,
                 " needs a tokenizer model (data.tokenizer_model, --tokenizer-model)");
  switch (data.tokenizer_type) {
    case TokenizerType::ByteLevelTokenizer: return std::make_unique<ByteLevelTokenizer>();
    case TokenizerType::NullTokenizer:
      STRATA_CHECK(vocab_size.has_value(), "build_tokenizer: NullTokenizer needs a vocab size");
      return std::make_unique<NullTokenizer>(*vocab_size);
    case TokenizerType::GPT2BPETokenizer:
      STRATA_CHECK(vocab_file.has_value() && !vocab_file->empty(), "build_tokenizer: GPT2BPETokenizer needs a vocab file");
      STRATA_CHECK(merge_file.has_value() && !merge_file->empty(), "build_tokenizer: GPT2BPETokenizer needs a merge file");
      return std::make_unique<GPT2BPETokenizer>(*vocab_file, *merge_file);
    case TokenizerType::HuggingFaceTokenizer:
      return std::make_unique<HuggingFaceTokenizer>(*data.tokenizer_model, !data.tokenizer_hf_no_include_special_tokens);
    case TokenizerType::SentencePieceTokenizer:
    case TokenizerType::GPTSentencePieceTokenizer:
    case TokenizerType::Llama2Tokenizer: return std::make_unique<SentencePieceTokenizer>(*data.tokenizer_model, type_name);
    case TokenizerType::TikTokenizer:
      return std::make_unique<TikTokenizer>(*data.tokenizer_model, TikTokenizer::options_of(data, vocab_size));
  }
  STRATA_THROW("build_tokenizer: unknown tokenizer type");
}

// ---- StreamingDetokenizer -----------------------------------------------------------------------

std::string StreamingDetokenizer::push(int64_t id) {
  ids_.push_back(id);
  const std::string text = tokenizer_.decode(ids_);
  if (text.size() <= prefix_.size() || text.ends_with(kReplacementCharacter)) return {};
  STRATA_CHECK(text.compare(0, prefix_.size(), prefix_) == 0, "StreamingDetokenizer: ", tokenizer_.name(),
               " decodes a longer sequence to text that does not extend the shorter one's");
  std::string added = text.substr(prefix_.size());
  // Keep the ids of the previous emission on as context: decoders that treat the first token
  // specially (Metaspace, Strip) then see them as they are inside the whole sequence.
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_.decode(ids_);
  prefix_index_ = new_prefix_index;
  return added;
}

std::string StreamingDetokenizer::finish() {
  const std::string text = tokenizer_.decode(ids_);
  std::string rest = text.size() > prefix_.size() ? text.substr(prefix_.size()) : std::string();
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  return rest;
}

void check_vocab_fits(std::optional<int64_t> model_vocab_size, const Tokenizer& tokenizer) {
  if (!model_vocab_size || *model_vocab_size >= tokenizer.vocab_size()) return;
  throw config::ConfigError("model.vocab_size",
                            std::to_string(*model_vocab_size) + " is smaller than the tokenizer's vocabulary (" +
                                tokenizer.name() + ": " + std::to_string(tokenizer.vocab_size()) + " ids, EOD " +
                                std::to_string(tokenizer.eod()) + "); set it to at least " +
                                std::to_string(tokenizer.vocab_size()) + " or null (taken from the tokenizer)");
}

std::unique_ptr<Tokenizer> build_checked_tokenizer(const DataConfig& data, std::optional<int64_t> model_vocab_size) {
  std::unique_ptr<Tokenizer> t = build_tokenizer(data, model_vocab_size);
  check_vocab_fits(model_vocab_size, *t);
  return t;
}

}  // namespace strata::data
