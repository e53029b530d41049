// HuggingFaceTokenizer (data/tokenizer_hf.h): loading tokenizer.json and the special tokens of
// tokenizer_config.json, added-token splitting, the encode pipeline and the post-processor template.
// Reference: huggingface/tokenizers tokenizers/src/tokenizer/{mod.rs (Tokenizer::encode_single_
// sequence, decode), added_vocabulary.rs (split_with_indices: leftmost-longest, lstrip/rstrip;
// extract_and_normalize)}, processors/{template.rs, sequence.rs, byte_level.rs};
// megatron/core/tokenizers/text/libraries/huggingface_tokenizer.py.
#include "data/tokenizer_hf.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/tokenizer_hf_parts.h"
#include "data/utf8.h"

namespace strata::data {

namespace fs = std::filesystem;
using hf::JsonNode;
using hf::json;

namespace {

std::string read_tokenizer_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK_KIND(ErrorKind::Io, in.good(), "HuggingFaceTokenizer: cannot read ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_tokenizer_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    STRATA_THROW_KIND(ErrorKind::Config, source, ": not valid JSON (truncated or malformed): ", e.what());
  }
}

// tokenizer.json of a path (the file itself, or DIR/tokenizer.json).
fs::path tokenizer_json_path(const std::string& path) {
  STRATA_CHECK_KIND(ErrorKind::Io, fs::exists(path), "HuggingFaceTokenizer: ", path,
                    " does not exist (data.tokenizer_model: a tokenizer.json or a directory holding one)");
  const fs::path p = fs::is_directory(path) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  STRATA_CHECK_KIND(ErrorKind::Io, fs::is_regular_file(p), "HuggingFaceTokenizer: ", p.string(),
                    " is missing (data.tokenizer_model names a directory without a tokenizer.json)");
  return p;
}

// A special token of tokenizer_config.json: a string or an AddedToken object {"content": …}.
std::optional<std::string> special_token(const JsonNode& config, const char* key) {
  auto n = config.find(key);
  if (!n) return std::nullopt;
  if (n->value().is_string()) return n->str();
  return n->at("content").str();
}

}  // namespace

HuggingFaceTokenizer::HuggingFaceTokenizer() = default;
HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

HuggingFaceTokenizer::HuggingFaceTokenizer(const std::string& path, bool include_special_tokens) {
  include_special_tokens_ = include_special_tokens;
  const fs::path file = tokenizer_json_path(path);
  std::string specials = "{}", specials_source = "(no tokenizer_config.json or special_tokens_map.json beside it)";
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path p = file.parent_path() / name;
    if (fs::is_regular_file(p)) {
      specials = read_tokenizer_file(p);
      specials_source = p.string();
      break;
    }
  }
  load(read_tokenizer_file(file), specials, file.string(), specials_source);
}

std::unique_ptr<HuggingFaceTokenizer> HuggingFaceTokenizer::from_strings(const std::string& tokenizer_json,
                                                                         const std::string& special_tokens_json,
                                                                         const std::string& source,
                                                                         bool include_special_tokens) {
  std::unique_ptr<HuggingFaceTokenizer> t(new HuggingFaceTokenizer());
  t->include_special_tokens_ = include_special_tokens;
  t->load(tokenizer_json, special_tokens_json, source, source + " (special tokens)");
  return t;
}

std::vector<std::string> HuggingFaceTokenizer::files_of(const std::string& path) {
  const fs::path file = tokenizer_json_path(path);
  std::vector<std::string> files = {file.string()};
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"})
    if (fs::is_regular_file(file.parent_path() / name)) files.push_back((file.parent_path() / name).string());
  return files;
}

void HuggingFaceTokenizer::load(const std::string& tokenizer_json, const std::string& special_tokens_json,
                                const std::string& source, const std::string& special_tokens_source) {
  const json doc = parse_tokenizer_json(tokenizer_json, source);
  const JsonNode root(doc, "$", std::make_shared<std::string>(source));
  if (!doc.is_object()) root.fail("expected a tokenizer.json object");
  for (const char* unsupported : {"truncation", "padding"})
    if (auto n = root.find(unsupported))
      n->fail(std::string(unsupported) + " is set; Strata's tokenizer does not truncate or pad (set it to null)");

  JsonNode model = root.at("model");
  if (!model.find("type") && model.find("merges")) {  // older files leave the BPE model's type out
    json typed = model.value();
    typed["type"] = "BPE";
    model_ = std::make_unique<hf::BpeModel>(JsonNode(typed, model.path(), std::make_shared<std::string>(source)));
  } else {
    model_ = std::make_unique<hf::BpeModel>(model);
  }
  if (auto n = root.find("normalizer")) normalizer_ = hf::make_normalizer(*n);
  if (auto n = root.find("pre_tokenizer")) pre_tokenizer_ = hf::make_pre_tokenizer(*n);
  if (auto n = root.find("decoder")) decoder_ = hf::make_decoder(*n);

  int64_t max_id = static_cast<int64_t>(model_->id_to_token().size()) - 1;
  if (auto list = root.find("added_tokens")) {
    for (size_t i = 0; i < list->size(); ++i) {
      const JsonNode t = list->at(i);
      if (t.bool_or("single_word", false))
        t.at("single_word").fail("single_word added tokens are not implemented");
      AddedToken a{t.at("content").str(), t.at("id").integer(), t.bool_or("lstrip", false), t.bool_or("rstrip", false),
                   t.bool_or("special", false)};
      if (a.content.empty()) t.at("content").fail("an empty added token");
      if (a.id < 0 || a.id >= (int64_t{1} << 31)) t.at("id").fail("a token id must be in [0, 2^31)");
      const bool normalized = t.bool_or("normalized", !a.special);
      added_by_first_byte_[normalized][static_cast<unsigned char>(a.content[0])].push_back(static_cast<int>(added_.size()));
      max_id = std::max(max_id, a.id);
      added_.push_back(std::move(a));
    }
  }
  for (auto& table : added_by_first_byte_)
    for (auto& candidates : table)
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](int a, int b) { return added_[a].content.size() > added_[b].content.size(); });
  if (auto list = root.find("added_tokens")) hf::check_id_range(max_id, model_->size() + added_.size(), *list);
  vocab_size_ = max_id + 1;
  id_to_added_.assign(static_cast<size_t>(vocab_size_), std::string());
  special_id_.assign(static_cast<size_t>(vocab_size_), false);
  for (const AddedToken& a : added_) {
    id_to_added_[static_cast<size_t>(a.id)] = a.content;
    special_id_[static_cast<size_t>(a.id)] = a.special;
  }

  // The post-processor: the single-sequence template (TemplateProcessing, possibly in a Sequence).
  std::vector<JsonNode> processors;
  if (auto p = root.find("post_processor")) processors.push_back(*p);
  for (size_t k = 0; k < processors.size(); ++k) {
    const JsonNode p = processors[k];
    const std::string type = p.type();
    if (type == "Sequence") {
      const JsonNode list = p.at("processors");
      for (size_t i = 0; i < list.size(); ++i) processors.push_back(list.at(i));
    } else if (type == "TemplateProcessing") {
      const JsonNode single = p.at("single");
      const JsonNode specials = p.at("special_tokens");
      bool after = false;
      for (size_t i = 0; i < single.size(); ++i) {
        const JsonNode item = single.at(i);
        if (auto seq = item.find("Sequence")) {
          if (seq->at("id").str() != "A" || after) seq->fail("the single template must hold $A once");
          after = true;
          continue;
        }
        const JsonNode tok = specials.at(item.at("SpecialToken").at("id").str());
        const JsonNode ids = tok.at("ids");
        for (size_t j = 0; j < ids.size(); ++j) {
          const int64_t id = ids.at(j).integer();
          // An id beyond the vocabulary would reach the embedding table out of range.
          if (id < 0 || id >= vocab_size_)
            ids.at(j).fail("template token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(vocab_size_) + ")");
          (after ? template_after_ : template_before_).push_back(id);
        }
      }
      if (!after) single.fail("the single template has no $A");
    } else if (type != "ByteLevel") {  // ByteLevel's post-processing only trims offsets
      p.at("type").fail("post-processor \"" + type + "\" is not implemented (Strata has TemplateProcessing, "
                        "ByteLevel and Sequence)");
    }
  }

  // The special tokens of tokenizer_config.json: eos → EOD (Megatron), bos, as AutoTokenizer reads them.
  const json specials_doc = parse_tokenizer_json(special_tokens_json, special_tokens_source);
  const JsonNode specials(specials_doc, "$", std::make_shared<std::string>(special_tokens_source));
  auto id_of = [&](const std::string& token, const char* key) {
    auto id = token_to_id(token);
    if (!id) specials.at(key).fail("\"" + token + "\" is neither an added token nor in the vocabulary of " + source);
    return *id;
  };
  const auto eos = special_token(specials, "eos_token");
  if (!eos)
    specials.fail("no eos_token: Megatron's HuggingFaceTokenizer takes the end-of-document id from it (" + source +
                  " does not say which token ends a document)");
  eod_ = id_of(*eos, "eos_token");
  if (auto bos = special_token(specials, "bos_token")) bos_ = id_of(*bos, "bos_token");
}

std::optional<int64_t> HuggingFaceTokenizer::token_to_id(const std::string& token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  return model_->token_to_id(token);
}

std::vector<HuggingFaceTokenizer::Segment> HuggingFaceTokenizer::split_added(const std::string& text,
                                                                           bool normalized) const {
  std::vector<Segment> out;
  const auto& table = added_by_first_byte_[normalized];
  size_t done = 0;  // text before this is in `out`
  size_t len = 0;
  for (size_t i = 0; i < text.size();) {
    const auto& candidates = table[static_cast<unsigned char>(text[i])];
    const AddedToken* hit = nullptr;
    for (int c : candidates)
      if (text.compare(i, added_[c].content.size(), added_[c].content) == 0) {
        hit = &added_[c];
        break;
      }
    if (!hit) {
      decode_utf8(text, i, len);
      i += len;
      continue;
    }
    size_t begin = i, end = i + hit->content.size();
    if (hit->lstrip)  // the whitespace before it, back to the previous token
      while (begin > done) {
        size_t start = begin - 1;
        while (start > done && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        if (!unicode_is_space(decode_utf8(text, start, len))) break;
        begin = start;
      }
    if (hit->rstrip)
      while (end < text.size() && unicode_is_space(decode_utf8(text, end, len))) end += len;
    if (begin > done) out.push_back({done, begin, -1});
    out.push_back({begin, end, hit->id});
    done = i = end;
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
  return out;
}

std::vector<int64_t> HuggingFaceTokenizer::encode(std::string_view raw) const {
  const std::string text = utf8_replace_invalid(raw);
  std::vector<int64_t> ids;
  if (include_special_tokens_) ids = template_before_;
  for (const Segment& seg : split_added(text, false)) {
    if (seg.added >= 0) {
      ids.push_back(seg.added);
      continue;
    }
    std::string normalized = text.substr(seg.begin, seg.end - seg.begin);
    if (normalizer_) normalizer_->normalize(normalized);
    for (const Segment& sub : split_added(normalized, true)) {
      if (sub.added >= 0) {
        ids.push_back(sub.added);
        continue;
      }
      std::vector<hf::TextPiece> pieces{{normalized.substr(sub.begin, sub.end - sub.begin), seg.begin == 0 && sub.begin == 0}};
      if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
      for (const hf::TextPiece& p : pieces) model_->tokenize(p.text, ids);
    }
  }
  if (include_special_tokens_) ids.insert(ids.end(), template_after_.begin(), template_after_.end());
  return ids;
}

std::string HuggingFaceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  const auto& model_tokens = model_->id_to_token();
  for (int64_t id : ids) {
    STRATA_CHECK(id >= 0 && id < vocab_size_, "HuggingFaceTokenizer.decode: id ", id, " is outside [0, ", vocab_size_, ")");
    const auto i = static_cast<size_t>(id);
    if (!include_special_tokens_ && special_id_[i]) continue;
    if (!id_to_added_[i].empty()) tokens.push_back(id_to_added_[i]);
    else if (i < model_tokens.size() && !model_tokens[i].empty()) tokens.push_back(model_tokens[i]);
    else STRATA_THROW("HuggingFaceTokenizer.decode: id ", id, " names no token");
  }
  if (!decoder_) {  // the reference joins the tokens with spaces
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace strata::data
