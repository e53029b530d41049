// The GPT-2 byte-level BPE tokenizer (data/tokenizer.h): bytes_to_unicode, the GPT-2 pre-tokenizer
// as a hand-written UTF-8 scanner (instead of a regex engine), BPE merges by rank with a cache.
// Reference: openai/gpt-2 src/encoder.py (bytes_to_unicode, get_pairs, Encoder.bpe/encode/decode),
// as copied into Megatron-LM megatron/training/tokenizer/gpt2_tokenization.py.
#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/tokenizer_unicode_tables.h"
#include "data/utf8.h"

namespace strata::data {
namespace {

template <size_t N>
bool in_ranges(const unicode_tables::CodeRange (&ranges)[N], uint32_t cp) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                             [](uint32_t v, const unicode_tables::CodeRange& r) { return v < r.first; });
  if (it == std::begin(ranges)) return false;
  --it;
  return cp <= it->last;
}

constexpr uint32_t kInvalid = kInvalidCodePoint;  // an ill-formed sequence: one "character" of class other

enum class CharClass { Letter, Number, Space, Other };

CharClass classify(uint32_t cp) {
  if (cp == kInvalid) return CharClass::Other;
  if (unicode_is_space(cp)) return CharClass::Space;
  if (unicode_is_letter(cp)) return CharClass::Letter;
  if (unicode_is_number(cp)) return CharClass::Number;
  return CharClass::Other;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK_KIND(ErrorKind::Io, in.good(), "GPT2BPETokenizer: cannot open ", what, " '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool unicode_is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z');
  return in_ranges(unicode_tables::kLetterRanges, cp);
}

bool unicode_is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(unicode_tables::kNumberRanges, cp);
}

bool unicode_is_space(uint32_t cp) {  // Unicode White_Space (what the `regex` module's \s matches)
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// ---- bytes_to_unicode ---------------------------------------------------------------------------

namespace {
struct ByteTables {
  std::array<uint32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  ByteTables() {
    std::array<bool, 256> printable{};
    for (int b = '!'; b <= '~'; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      code_point[b] = printable[b] ? static_cast<uint32_t>(b) : 256 + n++;
      append_utf8(utf8[b], code_point[b]);
    }
  }
};
const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}
}  // namespace

const std::array<std::string, 256>& gpt2_byte_encoder() { return byte_tables().utf8; }

int gpt2_byte_decode(uint32_t code_point) {
  // The alphabet is U+0021..U+00FF (minus the remapped ones) plus U+0100..U+0143.
  const auto& t = byte_tables();
  if (code_point < 256) return t.code_point[code_point] == code_point ? static_cast<int>(code_point) : -1;
  if (code_point >= 256 + 68) return -1;
  for (int b = 0; b < 256; ++b)
    if (t.code_point[b] == code_point) return b;
  return -1;
}

// ---- pre-tokenizer ------------------------------------------------------------------------------

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  const size_t n = text.size();
  size_t len = 0;
  auto class_at = [&](size_t pos, size_t& l) { return classify(decode_utf8(text, pos, l)); };
  size_t i = 0;
  while (i < n) {
    // 's|'t|'re|'ve|'m|'ll|'d
    if (text[i] == '\'' && i + 1 < n) {
      const char a = text[i + 1];
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        pieces.push_back(text.substr(i, 2));
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const char b = text[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          pieces.push_back(text.substr(i, 3));
          i += 3;
          continue;
        }
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional ASCII space, then a run of one class.
    const size_t k = (text[i] == ' ' && i + 1 < n) ? i + 1 : i;
    const CharClass c = class_at(k, len);
    if (c != CharClass::Space) {
      size_t e = k + len;
      while (e < n && class_at(e, len) == c) e += len;
      pieces.push_back(text.substr(i, e - i));
      i = e;
      continue;
    }
    // `\s+(?!\S)|\s+`: a whitespace run; when a non-space follows, its last character is left for
    // the next piece (so " word" keeps its space), unless the run is a single character.
    size_t e = i, last = i, count = 0;
    while (e < n && class_at(e, len) == CharClass::Space) {
      last = e;
      e += len;
      ++count;
    }
    if (e < n && count >= 2) e = last;
    pieces.push_back(text.substr(i, e - i));
    i = e;
  }
  return pieces;
}

// ---- GPT2BPETokenizer ---------------------------------------------------------------------------

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file) {
  load(read_file(vocab_file, "vocab file"), read_file(merge_file, "merge file"), vocab_file + ", " + merge_file);
}

std::unique_ptr<GPT2BPETokenizer> GPT2BPETokenizer::from_strings(const std::string& vocab_json,
                                                                 const std::string& merges_txt,
                                                                 const std::string& source) {
  std::unique_ptr<GPT2BPETokenizer> t(new GPT2BPETokenizer());
  t->load(vocab_json, merges_txt, source);
  return t;
}

void GPT2BPETokenizer::load(const std::string& vocab_json, const std::string& merges_txt, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW("GPT2BPETokenizer: vocab file of ", source, " is not valid JSON: ", e.what());
  }
  STRATA_CHECK(j.is_object() && !j.empty(), "GPT2BPETokenizer: vocab file of ", source,
               " must be a non-empty JSON object {token: id}");
  decoder_.assign(j.size(), std::string());
  std::vector<bool> seen(j.size(), false);
  for (auto it = j.begin(); it != j.end(); ++it) {
    STRATA_CHECK(it.value().is_number_integer(), "GPT2BPETokenizer: vocab entry '", it.key(), "' of ", source,
                 " has a non-integer id");
    const int64_t id = it.value().get<int64_t>();
    STRATA_CHECK(id >= 0 && id < static_cast<int64_t>(j.size()) && !seen[id], "GPT2BPETokenizer: vocab of ", source,
                 " must map its ", j.size(), " tokens to distinct ids 0..", j.size() - 1, "; '", it.key(),
                 "' has id ", id);
    seen[id] = true;
    decoder_[id] = it.key();
    encoder_[it.key()] = id;
  }
  auto eod = encoder_.find("<|endoftext|>");
  STRATA_CHECK(eod != encoder_.end(), "GPT2BPETokenizer: vocab of ", source, " has no \"<|endoftext|>\" token");
  eod_ = eod->second;

  std::istringstream lines(merges_txt);
  std::string line;
  int64_t rank = 0, line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    STRATA_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
                 "GPT2BPETokenizer: merges of ", source, " line ", line_no, ": expected \"a b\", got \"", line, "\"");
    ranks_.emplace(line, rank++);  // the first occurrence of a pair keeps its rank
  }
}

std::vector<std::string> GPT2BPETokenizer::bpe(std::string_view pretoken) const {
  const auto& enc = gpt2_byte_encoder();
  std::vector<std::string> word;
  word.reserve(pretoken.size());
  for (char ch : pretoken) word.push_back(enc[static_cast<unsigned char>(ch)]);
  std::string key;
  while (word.size() > 1) {
    // The adjacent pair with the lowest merge rank.
    int64_t best = std::numeric_limits<int64_t>::max();
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]).append(" ").append(word[i + 1]);
      auto it = ranks_.find(key);
      if (it != ranks_.end() && it->second < best) best = it->second, best_i = i;
    }
    if (best == std::numeric_limits<int64_t>::max()) break;
    // Merge every non-overlapping occurrence of that pair, left to right (encoder.py's bpe()).
    const std::string first = word[best_i], second = word[best_i + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i]);
        i += 1;
      }
    }
    word.swap(merged);
  }
  return word;
}

std::vector<int64_t> GPT2BPETokenizer::encode(std::string_view text) const {
  constexpr size_t kMaxCacheEntries = 1 << 20;
  std::vector<int64_t> ids;
  for (std::string_view piece : gpt2_pretokenize(text)) {
    std::string key(piece);
    auto hit = cache_.find(key);
    if (hit == cache_.end()) {
      std::vector<int64_t> piece_ids;
      for (const std::string& sym : bpe(piece)) {
        auto it = encoder_.find(sym);
        STRATA_CHECK(it != encoder_.end(), "GPT2BPETokenizer.encode: BPE symbol '", sym,
                     "' is not in the vocabulary (vocab.json and merges.txt do not match)");
        piece_ids.push_back(it->second);
      }
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      hit = cache_.emplace(std::move(key), std::move(piece_ids)).first;
    }
    ids.insert(ids.end(), hit->second.begin(), hit->second.end());
  }
  return ids;
}

std::string GPT2BPETokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  size_t len = 0;
  for (int64_t id : ids) {
    STRATA_CHECK(id >= 0 && id < vocab_size(), "GPT2BPETokenizer.decode: id ", id, " is outside [0, ", vocab_size(),
                 ")");
    const std::string& tok = decoder_[id];
    for (size_t i = 0; i < tok.size(); i += len) {
      const uint32_t cp = decode_utf8(tok, i, len);
      const int b = cp == kInvalid ? -1 : gpt2_byte_decode(cp);
      STRATA_CHECK(b >= 0, "GPT2BPETokenizer.decode: token ", id, " ('", tok,
                   "') has a character outside the bytes_to_unicode alphabet");
      out.push_back(static_cast<char>(b));
    }
  }
  return out;
}

}  // namespace strata::data
