// tokenizer.json components (data/tokenizer_hf_parts.h): JSON paths, patterns, normalizers,
// pre-tokenizers and decoders. The BPE model is in data/tokenizer_hf_bpe.cpp.
// Reference: huggingface/tokenizers tokenizers/src/normalizers/{unicode,prepend,replace,utils}.rs,
// pre_tokenizers/{byte_level,split,metaspace,digits,sequence}.rs, decoders/{byte_level,metaspace,
// byte_fallback,fuse,strip,sequence}.rs, tokenizer/normalizer.rs (split behaviours), tokenizer/
// pattern.rs (find_matches: empty matches are matches, an empty text has none).
#include "data/tokenizer_hf_parts.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

namespace strata::data::hf {

// ---- JsonNode -----------------------------------------------------------------------------------

void JsonNode::fail(const std::string& what) const {
  STRATA_THROW_KIND(ErrorKind::Config, *file_, ": at ", path_, ": ", what);
}

JsonNode JsonNode::at(const std::string& key) const {
  if (!value_->is_object()) fail("expected an object");
  auto it = value_->find(key);
  if (it == value_->end()) fail("missing \"" + key + "\"");
  return JsonNode(*it, path_ + "." + key, file_);
}

std::optional<JsonNode> JsonNode::find(const std::string& key) const {
  if (!value_->is_object()) fail("expected an object");
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonNode(*it, path_ + "." + key, file_);
}

JsonNode JsonNode::at(size_t index) const {
  if (!value_->is_array() || index >= value_->size()) fail("expected an array of more than " + std::to_string(index) + " items");
  return JsonNode((*value_)[index], path_ + "[" + std::to_string(index) + "]", file_);
}

size_t JsonNode::size() const {
  if (!value_->is_array() && !value_->is_object()) fail("expected an array or object");
  return value_->size();
}

std::vector<std::pair<std::string, JsonNode>> JsonNode::members() const {
  if (!value_->is_object()) fail("expected an object");
  std::vector<std::pair<std::string, JsonNode>> out;
  for (auto it = value_->begin(); it != value_->end(); ++it)
    out.emplace_back(it.key(), JsonNode(it.value(), path_ + "." + it.key(), file_));
  return out;
}

std::string JsonNode::str() const {
  if (!value_->is_string()) fail("expected a string");
  return value_->get<std::string>();
}

bool JsonNode::boolean() const {
  if (!value_->is_boolean()) fail("expected true or false");
  return value_->get<bool>();
}

int64_t JsonNode::integer() const {
  if (!value_->is_number_integer()) fail("expected an integer");
  return value_->get<int64_t>();
}

std::string JsonNode::str_or(const std::string& key, const std::string& fallback) const {
  auto n = find(key);
  return n ? n->str() : fallback;
}

bool JsonNode::bool_or(const std::string& key, bool fallback) const {
  auto n = find(key);
  return n ? n->boolean() : fallback;
}

// ---- Pattern ------------------------------------------------------------------------------------

Pattern::Pattern(const JsonNode& node) : file_(node.file()), path_(node.path()) {
  if (auto s = node.find("String")) {
    literal_ = s->str();
    if (literal_.empty()) compile("", *s);  // `tokenizers` escapes it into a regex that matches everywhere
    return;
  }
  const JsonNode re = node.at("Regex");
  compile(re.str(), re);
}

Pattern::Pattern(const std::string& regex, const JsonNode& where) : file_(where.file()), path_(where.path()) {
  compile(regex, where);
}

Pattern::~Pattern() = default;

void Pattern::compile(const std::string& regex, const JsonNode& where) {
  source_ = regex;
  regex_ = std::make_unique<OnigRegex>(regex);
  if (!regex_->error().empty()) where.fail("the regex \"" + regex + "\" cannot be used: " + regex_->error());
}

std::vector<ByteRange> Pattern::find_all(std::string_view text) const {
  std::vector<ByteRange> out;
  if (text.empty()) return out;
  if (!regex_) {
    for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size()))
      out.emplace_back(at, at + literal_.size());
    return out;
  }
  if (const int rc = regex_->find_all(text, out); rc < 0) {
    size_t cut = std::min<size_t>(text.size(), 80);
    while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;  // a whole character
    STRATA_THROW_KIND(ErrorKind::Runtime, file_, ": at ", path_, ": the regex \"", source_, "\" failed on a text of ", text.size(),
                      " bytes starting \"", utf8_replace_invalid(text.substr(0, cut)), cut < text.size() ? "…" : "",
                      "\" (", OnigRegex::match_error_message(rc), ")");
  }
  return out;
}

// ---- splitting by matches (NormalizedString::split) ---------------------------------------------

namespace {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

SplitBehavior parse_behavior(const JsonNode& node) {
  const std::string b = node.str();
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  node.fail("unknown split behavior \"" + b + "\"");
}

// The pieces of `piece` cut at `matches` under `behavior` (pattern.rs find_matches, then
// normalizer.rs split), appended to `out`; empty pieces are dropped.
void split_piece(const TextPiece& piece, const std::vector<ByteRange>& matches, SplitBehavior behavior, bool invert,
                 std::vector<TextPiece>& out) {
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;  // the whole text, alternating non-matches and matches
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != piece.text.size()) spans.push_back({prev, piece.text.size(), false});
  if (invert)
    for (Span& s : spans) s.is_match = !s.is_match;
  std::vector<Span> kept;
  switch (behavior) {
    case SplitBehavior::Isolated: kept = spans; break;
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) kept.push_back(s);
      break;
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().begin = it->begin;
        else kept.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const Span& s : kept)
    if (s.end > s.begin) out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_text_start && s.begin == 0});
}

std::string codepoint_string(const JsonNode& node) {  // a one-character string ("▁")
  const std::string s = node.str();
  size_t len = 0;
  if (s.empty() || decode_utf8(s, 0, len) == kInvalidCodePoint || len != s.size()) node.fail("expected one character");
  return s;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty() || text.find(from) == std::string::npos) return;
  std::string out;
  size_t at = 0;
  for (size_t hit = text.find(from); hit != std::string::npos; hit = text.find(from, at)) {
    out.append(text, at, hit - at).append(to);
    at = hit + from.size();
  }
  out.append(text, at);
  text.swap(out);
}

}  // namespace

// ---- normalizers --------------------------------------------------------------------------------

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    if (text.empty()) return;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &out,
                                            static_cast<utf8proc_option_t>(options_));
    STRATA_CHECK(n >= 0, "tokenizer: Unicode normalization failed: ", utf8proc_errmsg(n));
    text.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  explicit ReplaceNormalizer(const JsonNode& node) : pattern_(node.at("pattern")), content_(node.at("content").str()) {}
  void normalize(std::string& text) const override {
    const std::vector<ByteRange> hits = pattern_.find_all(text);
    if (hits.empty()) return;
    std::string out;
    size_t at = 0;
    for (const auto& [b, e] : hits) {
      out.append(text, at, b - at).append(content_);
      at = e;
    }
    out.append(text, at);
    text.swap(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class StripNormalizer final : public Normalizer {  // strips Unicode White_Space at either end
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size(), len = 0;
    if (left_)
      while (begin < end && unicode_is_space(decode_utf8(text, begin, len))) begin += len;
    if (right_)
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        if (!unicode_is_space(decode_utf8(text, start, len))) break;
        end = start;
      }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class NormalizerSequence final : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node) {
  const std::string type = node.type();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(node.at("prepend").str());
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(node);
  if (type == "Strip") return std::make_unique<StripNormalizer>(node.bool_or("strip_left", false), node.bool_or("strip_right", false));
  if (type == "Sequence") {
    const JsonNode list = node.at("normalizers");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_normalizer(list.at(i)));
    return std::make_unique<NormalizerSequence>(std::move(parts));
  }
  node.fail("normalizer \"" + type + "\" is not implemented (Strata has NFC, NFD, NFKC, NFKD, Prepend, Replace, "
            "Strip and Sequence)");
}

// ---- pre-tokenizers -----------------------------------------------------------------------------

namespace {

// GPT-2's pattern, as the ByteLevel pre-tokenizer writes it (byte_level.rs).
const char* const kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  explicit ByteLevelPreTokenizer(const JsonNode& node)
      : add_prefix_space_(node.bool_or("add_prefix_space", true)), use_regex_(node.bool_or("use_regex", true)),
        regex_(kByteLevelPattern, node) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    for (TextPiece& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (use_regex_) split_piece(p, regex_.find_all(p.text), SplitBehavior::Isolated, false, out);
      else if (!p.text.empty()) out.push_back(std::move(p));
    }
    const auto& alphabet = gpt2_byte_encoder();
    for (TextPiece& p : out) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += alphabet[static_cast<unsigned char>(c)];
      p.text.swap(mapped);
    }
    pieces.swap(out);
  }

 private:
  bool add_prefix_space_, use_regex_;
  Pattern regex_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  explicit SplitPreTokenizer(const JsonNode& node)
      : pattern_(node.at("pattern")), behavior_(parse_behavior(node.at("behavior"))),
        invert_(node.bool_or("invert", false)) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    for (const TextPiece& p : pieces) split_piece(p, pattern_.find_all(p.text), behavior_, invert_, out);
    pieces.swap(out);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { Always, First, Never };

PrependScheme parse_prepend_scheme(const JsonNode& node) {
  if (auto s = node.find("prepend_scheme")) {
    const std::string v = s->str();
    if (v == "always") return PrependScheme::Always;
    if (v == "first") return PrependScheme::First;
    if (v == "never") return PrependScheme::Never;
    s->fail("unknown prepend_scheme \"" + v + "\"");
  }
  return node.bool_or("add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;  // the older format
}

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  explicit MetaspacePreTokenizer(const JsonNode& node)
      : replacement_(codepoint_string(node.at("replacement"))), scheme_(parse_prepend_scheme(node)),
        split_(node.bool_or("split", true)) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    for (TextPiece& p : pieces) {
      replace_all(p.text, " ", replacement_);
      const bool starts = p.text.rfind(replacement_, 0) == 0;
      if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && p.at_text_start)))
        p.text.insert(0, replacement_);
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        continue;
      }
      std::vector<ByteRange> hits;
      for (size_t at = p.text.find(replacement_); at != std::string::npos; at = p.text.find(replacement_, at + 1))
        hits.emplace_back(at, at + replacement_.size());
      split_piece(p, hits, SplitBehavior::MergedWithNext, false, out);
    }
    pieces.swap(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer final : public PreTokenizer {  // numeric characters (Rust's char::is_numeric: \p{N}), each or as runs
 public:
  explicit DigitsPreTokenizer(const JsonNode& node) : individual_(node.bool_or("individual_digits", false)) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    for (const TextPiece& p : pieces) {
      std::vector<ByteRange> digits;
      size_t len = 0;
      for (size_t i = 0; i < p.text.size(); i += len)
        if (unicode_is_number(decode_utf8(p.text, i, len))) digits.emplace_back(i, i + len);
      split_piece(p, digits, individual_ ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false, out);
    }
    pieces.swap(out);
  }

 private:
  bool individual_;
};

class PreTokenizerSequence final : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node) {
  const std::string type = node.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(node);
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(node);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(node);
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(node);
  if (type == "Sequence") {
    const JsonNode list = node.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_pre_tokenizer(list.at(i)));
    return std::make_unique<PreTokenizerSequence>(std::move(parts));
  }
  node.fail("pre-tokenizer \"" + type + "\" is not implemented (Strata has ByteLevel, Split, Metaspace, Digits and "
            "Sequence)");
}

// ---- decoders -----------------------------------------------------------------------------------

namespace {

class ByteLevelDecoder final : public Decoder {  // the byte alphabet back to bytes, then lossy UTF-8
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      size_t len = 0;
      bool all = true;
      for (size_t i = 0; i < t.size() && all; i += len) {
        const uint32_t cp = decode_utf8(t, i, len);
        const int b = cp == kInvalidCodePoint ? -1 : gpt2_byte_decode(cp);
        if (b < 0) all = false;
        else mapped.push_back(static_cast<char>(b));
      }
      bytes += all ? mapped : t;  // a token outside the alphabet is kept as its own bytes
    }
    tokens.assign(1, utf8_replace_invalid(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  explicit MetaspaceDecoder(const JsonNode& node)
      : replacement_(codepoint_string(node.at("replacement"))), scheme_(parse_prepend_scheme(node)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      replace_all(tokens[i], replacement_, i == 0 && scheme_ != PrependScheme::Never ? "" : " ");
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class ByteFallbackDecoder final : public Decoder {  // runs of <0xXX> tokens → UTF-8, else one U+FFFD per byte
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) out.push_back(pending);
      else
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementCharacter);
      pending.clear();
    };
    for (std::string& t : tokens) {
      if (auto b = byte_of(t)) {
        pending.push_back(static_cast<char>(*b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
  }

 private:
  static std::optional<int> byte_of(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
    int v = 0;
    for (int k = 3; k < 5; ++k) {
      const char c = t[k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return std::nullopt;
      v = v * 16 + d;
    }
    return v;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

class StripDecoder final : public Decoder {  // up to `start` leading and `stop` trailing `content` characters
 public:
  explicit StripDecoder(const JsonNode& node)
      : content_(codepoint_string(node.at("content"))), start_(node.at("start").integer()), stop_(node.at("stop").integer()) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (int64_t i = 0; i < start_ && t.compare(begin, content_.size(), content_) == 0 && begin < end; ++i)
        begin += content_.size();
      for (int64_t i = 0; i < stop_ && end >= begin + content_.size() &&
                          t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(const JsonNode& node) : replace_(node) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) replace_.normalize(t);
  }

 private:
  ReplaceNormalizer replace_;
};

class DecoderSequence final : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonNode& node) {
  const std::string type = node.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(node);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(node);
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(node);
  if (type == "Sequence") {
    const JsonNode list = node.at("decoders");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_decoder(list.at(i)));
    return std::make_unique<DecoderSequence>(std::move(parts));
  }
  node.fail("decoder \"" + type + "\" is not implemented (Strata has ByteLevel, Metaspace, ByteFallback, Fuse, Strip, "
            "Replace and Sequence)");
}

}  // namespace strata::data::hf
