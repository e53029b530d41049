// Megatron's TikTokenizer (data/tokenizer_tiktoken.h): the vocabulary JSON, the special tokens and
// tiktoken's encode and decode.
// Reference: Megatron-LM megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py
// (reload_mergeable_ranks, TikTokenTokenizer.__init__, text_to_ids, ids_to_text); openai/tiktoken
// src/lib.rs (CoreBPE::encode_native, byte_pair_encode, _byte_pair_merge).
#include "data/tokenizer_tiktoken.h"

#include <algorithm>
#include <fstream>
#include <queue>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/onig_regex.h"
#include "data/tokenizer_hf_parts.h"
#include "data/utf8.h"

namespace strata::data {

namespace {

using config::ConfigError;
using hf::JsonNode;

// Megatron's default special tokens (tiktoken_tokenizer.py SPECIAL_TOKENS), which every list must hold.
const std::vector<std::string>& megatron_special_tokens() {
  static const std::vector<std::string> t = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"};
  return t;
}

// Standard base64 with '=' padding (Python's base64.b64decode of a well-formed string); nullopt
// for anything else.
std::optional<std::string> base64_decode(std::string_view s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (s.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    const size_t pad = last ? (s[i + 3] == '=' ? (s[i + 2] == '=' ? 2 : 1) : 0) : 0;
    uint32_t bits = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int v = k >= 4 - pad ? 0 : value(s[i + k]);
      if (v < 0) return std::nullopt;
      bits = bits << 6 | static_cast<uint32_t>(v);
    }
    out.push_back(static_cast<char>(bits >> 16));
    if (pad < 2) out.push_back(static_cast<char>(bits >> 8 & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(bits & 0xFF));
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK_KIND(ErrorKind::Io, in.good(), "TikTokenizer: cannot read ", path,
                    " (data.tokenizer_model, --tokenizer-model: Megatron's tiktoken vocabulary JSON)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string_view tiktoken_pattern_text(TiktokenPattern pattern) {
  // Megatron's PATTERN_TIKTOKEN (v1) and PATTERN_TIKTOKEN_V2.
  static constexpr std::string_view kV1 =
      R"([^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
  static constexpr std::string_view kV2 =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)"
      R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return pattern == TiktokenPattern::v1 ? kV1 : kV2;
}

TikTokenizer::Options TikTokenizer::options_of(const DataConfig& data, std::optional<int64_t> vocab_size) {
  Options o;
  o.pattern = data.tiktoken_pattern;
  o.num_special_tokens = data.tiktoken_num_special_tokens;
  o.special_tokens = data.tokenizer_special_tokens;
  if (vocab_size) o.vocab_size = *vocab_size;
  return o;
}

TikTokenizer::TikTokenizer(const std::string& vocab_file, const Options& options) {
  load(read_file(vocab_file), options, vocab_file);
}

std::unique_ptr<TikTokenizer> TikTokenizer::from_string(const std::string& vocab_json, const Options& options,
                                                        const std::string& source) {
  std::unique_ptr<TikTokenizer> t(new TikTokenizer());
  t->load(vocab_json, options, source);
  return t;
}

TikTokenizer::~TikTokenizer() = default;

void TikTokenizer::set_special_tokens(const Options& o) {
  const std::vector<std::string> given = o.special_tokens.empty() ? megatron_special_tokens() : o.special_tokens;
  const std::string field = o.special_tokens.empty() ? "data.tiktoken_num_special_tokens" : "data.tokenizer_special_tokens";
  std::set<std::string> seen;
  for (const std::string& t : given) {
    if (t.empty()) throw ConfigError("data.tokenizer_special_tokens", "an empty special token");
    if (!seen.insert(t).second) throw ConfigError("data.tokenizer_special_tokens", "'" + t + "' is given twice");
  }
  for (const std::string& t : megatron_special_tokens())
    if (!seen.count(t))
      throw ConfigError("data.tokenizer_special_tokens",
                        "must include <unk> <s> </s> <mask> <pad> <cls> <sep> (Megatron's TikTokenizer); '" + t +
                            "' is missing");
  const auto n = static_cast<int64_t>(given.size());
  if (o.num_special_tokens < n)
    throw ConfigError("data.tiktoken_num_special_tokens", std::to_string(o.num_special_tokens) + " is fewer than the " +
                                                              std::to_string(n) + " special tokens");
  if (o.num_special_tokens >= o.vocab_size)
    throw ConfigError("data.tiktoken_num_special_tokens",
                      std::to_string(o.num_special_tokens) + " must be smaller than the vocabulary size " +
                          std::to_string(o.vocab_size) + " (model.vocab_size, --vocab-size; 131072 when not given)");
  special_ = given;
  for (int64_t k = n; k < o.num_special_tokens; ++k) {
    std::string filler = "<SPECIAL_" + std::to_string(k) + ">";
    if (!seen.insert(filler).second)
      throw ConfigError(field, "'" + filler + "' is both a given special token and the filler of id " +
                                   std::to_string(k) + " (Megatron requires them distinct)");
    special_.push_back(std::move(filler));
  }
  auto id_of = [&](const std::string& t) {
    return static_cast<int64_t>(std::find(special_.begin(), special_.end(), t) - special_.begin());
  };
  bos_ = id_of("<s>");
  eos_ = id_of("</s>");
  pad_ = id_of("<pad>");
  for (size_t id = 0; id < special_.size(); ++id)
    special_by_first_byte_[static_cast<unsigned char>(special_[id][0])].push_back(static_cast<int64_t>(id));
  for (auto& ids : special_by_first_byte_)
    std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) {
      return special_[static_cast<size_t>(a)].size() > special_[static_cast<size_t>(b)].size();
    });
}

void TikTokenizer::load(const std::string& vocab_json, const Options& o, const std::string& source) {
  set_special_tokens(o);
  const auto file = std::make_shared<const std::string>(source);
  hf::json doc;
  try {
    doc = hf::json::parse(vocab_json);
  } catch (const hf::json::exception& e) {
    STRATA_THROW_KIND(ErrorKind::Config, source, ": not valid JSON (truncated or malformed): ", e.what());
  }
  const JsonNode root(doc, "$", file);
  if (!doc.is_array())
    root.fail("expected a list of {\"rank\", \"token_bytes\", \"token_str\"} (Megatron's tiktoken vocabulary)");
  const int64_t inner = o.vocab_size - o.num_special_tokens;
  const auto entries = static_cast<int64_t>(doc.size());
  if (entries < inner)
    root.fail(std::to_string(entries) + " entries, but the vocabulary size " + std::to_string(o.vocab_size) +
              " (model.vocab_size, --vocab-size; 131072 when not given) minus data.tiktoken_num_special_tokens " +
              std::to_string(o.num_special_tokens) + " needs " + std::to_string(inner) +
              " (Megatron cuts the file to that many, and it must have them)");
  if (inner < 256)
    root.fail("the vocabulary size " + std::to_string(o.vocab_size) + " minus data.tiktoken_num_special_tokens " +
              std::to_string(o.num_special_tokens) + " leaves " + std::to_string(inner) +
              " entries of the file: fewer than the 256 single bytes every text needs");
  id_to_bytes_ = special_;
  id_to_bytes_.reserve(static_cast<size_t>(o.vocab_size));
  ranks_.reserve(static_cast<size_t>(inner));
  for (int64_t k = 0; k < inner; ++k) {
    const JsonNode e = root.at(static_cast<size_t>(k));
    if (!e.value().is_object() || e.size() != 3 || !e.value().contains("rank") ||
        !e.value().contains("token_bytes") || !e.value().contains("token_str"))
      e.fail("expected an object with exactly \"rank\", \"token_bytes\" and \"token_str\"");
    if (e.at("rank").integer() != k) e.at("rank").fail("the rank must be the entry's index, " + std::to_string(k));
    const JsonNode b64 = e.at("token_bytes");
    const std::optional<std::string> bytes = base64_decode(b64.str());
    if (!bytes || bytes->empty()) b64.fail("not base64 of one or more bytes");
    if (k < 256 && (bytes->size() != 1 || static_cast<unsigned char>((*bytes)[0]) != k))
      b64.fail("entries 0 to 255 are the single bytes 0 to 255 in order; this one is not byte " + std::to_string(k));
    const int64_t id = k + o.num_special_tokens;
    auto [it, added] = ranks_.emplace(*bytes, id);
    if (!added)
      b64.fail("the same bytes as entry " + std::to_string(it->second - o.num_special_tokens) +
               " (Megatron requires every entry's bytes distinct)");
    id_to_bytes_.push_back(*bytes);
  }
  regex_ = std::make_unique<hf::OnigRegex>(tiktoken_pattern_text(o.pattern));
  STRATA_CHECK(regex_->error().empty(), "TikTokenizer: the tiktoken pattern does not compile: ", regex_->error());
}

int64_t TikTokenizer::rank_of(std::string_view bytes) const {
  auto it = ranks_.find(bytes);
  return it == ranks_.end() ? -1 : it->second;
}

void TikTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& ids) const {
  if (piece.empty()) return;
  if (const int64_t whole = rank_of(piece); whole >= 0) {  // encode_native: a piece in the vocabulary is one id
    ids.push_back(whole);
    return;
  }
  // _byte_pair_merge: parts start at byte offsets; a part's rank is the rank of its bytes joined
  // with the next part's. The lowest rank merges first, the leftmost of equal ranks (equal ranks
  // are equal bytes); a heap with version counts for the entries a merge makes stale.
  const size_t n = piece.size();
  std::vector<size_t> next(n + 1), prev(n + 1);  // the parts' starts as a list; next[n] = n ends it
  std::vector<uint32_t> version(n, 0);
  for (size_t i = 0; i <= n; ++i) next[i] = std::min(i + 1, n), prev[i] = i - 1;  // prev[0] is never read
  struct Entry {
    int64_t rank;
    size_t start;
    uint32_t version;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](size_t i) {  // part i's rank (joined with the next part) changed
    ++version[i];
    if (next[i] >= n) return;
    if (const int64_t r = rank_of(piece.substr(i, next[next[i]] - i)); r >= 0) heap.push({r, i, version[i]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    if (top.version != version[top.start]) continue;  // stale: the part changed or was merged away since
    const size_t i = top.start, gone = next[i];
    next[i] = next[gone];
    if (next[i] < n) prev[next[i]] = i;
    version[gone] = 0xFFFFFFFFu;
    if (i > 0) push(prev[i]);
    push(i);
  }
  for (size_t i = 0; i < n; i = next[i]) {
    const int64_t id = rank_of(piece.substr(i, next[i] - i));
    STRATA_INTERNAL_ASSERT(id >= 0, "TikTokenizer: a merged part is not in the vocabulary");
    ids.push_back(id);
  }
}

void TikTokenizer::encode_ordinary(std::string_view text, std::vector<int64_t>& ids) const {
  if (text.empty()) return;
  std::vector<hf::ByteRange> pieces;
  const int rc = regex_->find_all(text, pieces);
  STRATA_CHECK(rc == 0, "TikTokenizer: the tiktoken pattern failed on a text of ", text.size(),
               " bytes: ", hf::OnigRegex::match_error_message(rc));
  constexpr size_t kMaxCachedLength = 64, kMaxCacheEntries = 1 << 18;
  for (const auto& [b, e] : pieces) {
    const std::string_view piece = text.substr(b, e - b);
    if (piece.size() > kMaxCachedLength) {
      encode_piece(piece, ids);
      continue;
    }
    auto hit = cache_.find(piece);
    if (hit == cache_.end()) {
      std::vector<int64_t> piece_ids;
      encode_piece(piece, piece_ids);
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      hit = cache_.emplace(std::string(piece), std::move(piece_ids)).first;
    }
    ids.insert(ids.end(), hit->second.begin(), hit->second.end());
  }
}

std::vector<int64_t> TikTokenizer::encode(std::string_view raw) const {
  const std::string text = utf8_replace_invalid(raw);
  std::vector<int64_t> ids;
  size_t start = 0;  // the ordinary text not yet encoded starts here
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& candidates = special_by_first_byte_[static_cast<unsigned char>(text[i])];
    for (int64_t id : candidates) {
      const std::string& s = special_[static_cast<size_t>(id)];
      if (text.compare(i, s.size(), s) != 0) continue;
      encode_ordinary(std::string_view(text).substr(start, i - start), ids);
      ids.push_back(id);
      start = i + s.size();
      i = start - 1;
      break;
    }
  }
  encode_ordinary(std::string_view(text).substr(start), ids);
  return ids;
}

std::string TikTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string bytes;
  for (int64_t id : ids) {
    STRATA_CHECK(id >= 0 && id < vocab_size(), "TikTokenizer.decode: id ", id, " is outside [0, ", vocab_size(), ")");
    bytes += id_to_bytes_[static_cast<size_t>(id)];
  }
  return utf8_replace_invalid(bytes);
}

}  // namespace strata::data
