// The BPE model of tokenizer.json (data/tokenizer_hf_parts.h, BpeModel): a word's characters
// (or their <0xXX> byte tokens, or the unknown token), then merges in rank order through a
// priority queue over a linked list of symbols, as `tokenizers` merges (Word::merge_all), so long
// words (SentencePiece-style BPE sees a whole text as one word) stay O(n log n).
// Reference: huggingface/tokenizers tokenizers/src/models/bpe/{model.rs (BPE::merge_word,
// tokenize, ignore_merges), word.rs (Word::merge_all), serialization.rs (merges as "a b" or [a, b])}.
#include <queue>

#include "core/error.h"
#include "data/tokenizer_hf_parts.h"
#include "data/utf8.h"

namespace strata::data::hf {

namespace {

uint64_t pair_key(int64_t left, int64_t right) {
  return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right);
}

}  // namespace

void check_id_range(int64_t max_id, size_t named, const JsonNode& where) {
  const int64_t n = static_cast<int64_t>(named);
  if (max_id + 1 > std::max(2 * n, n + 1024))
    where.fail("token ids reach " + std::to_string(max_id) + " but only " + std::to_string(n) +
               " tokens are named: most of the id range would be unused (a corrupt id?)");
}

BpeModel::BpeModel(const JsonNode& model) {
  if (model.type() != "BPE")
    model.at("type").fail("model \"" + model.type() + "\" is not implemented (Strata has BPE)");
  if (auto d = model.find("dropout"); d && d->value().is_number() && d->value().get<double>() > 0)
    d->fail("BPE dropout (random merges at encoding) is not implemented");
  const JsonNode vocab = model.at("vocab");
  int64_t max_id = -1;
  for (const auto& [token, id_node] : vocab.members()) {
    const int64_t id = id_node.integer();
    if (id < 0 || id >= (int64_t{1} << 31)) id_node.fail("a token id must be in [0, 2^31)");
    vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  if (vocab_.empty()) vocab.fail("an empty vocabulary");
  check_id_range(max_id, vocab_.size(), vocab);
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  std::vector<char> taken(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [token, id] : vocab_) {
    // Two tokens with one id would make decoding that id a guess (the reference keeps whichever its
    // hash map reverses last); no real vocabulary has them.
    if (taken[static_cast<size_t>(id)])
      vocab.fail("the tokens \"" + id_to_token_[static_cast<size_t>(id)] + "\" and \"" + token + "\" share id " +
                 std::to_string(id));
    taken[static_cast<size_t>(id)] = 1;
    id_to_token_[static_cast<size_t>(id)] = token;
  }

  if (auto unk = model.find("unk_token")) {
    auto it = vocab_.find(unk->str());
    if (it == vocab_.end()) unk->fail("the unknown token \"" + unk->str() + "\" is not in the vocabulary");
    unk_id_ = it->second;
  }
  fuse_unk_ = model.bool_or("fuse_unk", false);
  byte_fallback_ = model.bool_or("byte_fallback", false);
  ignore_merges_ = model.bool_or("ignore_merges", false);
  continuing_subword_prefix_ = model.str_or("continuing_subword_prefix", "");
  end_of_word_suffix_ = model.str_or("end_of_word_suffix", "");
  byte_ids_.assign(256, -1);
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const std::string code = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
    if (auto it = vocab_.find(code); it != vocab_.end()) byte_ids_[b] = it->second;
  }

  const JsonNode merges = model.at("merges");
  const size_t prefix_len = continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const JsonNode m = merges.at(rank);
    std::string left, right;
    if (m.value().is_string()) {
      const std::string s = m.str();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) m.fail("expected \"a b\"");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else {
      if (m.size() != 2) m.fail("expected a pair [a, b]");
      left = m.at(size_t{0}).str();
      right = m.at(size_t{1}).str();
    }
    auto l = vocab_.find(left), r = vocab_.find(right);
    if (l == vocab_.end() || r == vocab_.end()) m.fail("a merge of a token that is not in the vocabulary");
    // The merged token drops the right part's continuing-subword prefix (model.rs from_merges).
    const std::string merged = left + (prefix_len && right.rfind(continuing_subword_prefix_, 0) == 0
                                           ? right.substr(prefix_len)
                                           : right);
    auto n = vocab_.find(merged);
    if (n == vocab_.end()) m.fail("the merged token \"" + merged + "\" is not in the vocabulary");
    merges_.insert_or_assign(pair_key(l->second, r->second),  // a repeated pair keeps its last rank, as the reference's map
                    std::make_pair(static_cast<int32_t>(rank), static_cast<int32_t>(n->second)));
  }
}

std::optional<int64_t> BpeModel::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::tokenize(std::string_view piece, std::vector<int64_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(std::string(piece)); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  constexpr size_t kMaxCachedLength = 256, kMaxCacheEntries = 1 << 18;
  if (piece.size() < kMaxCachedLength) {
    std::string key(piece);
    auto hit = cache_.find(key);
    if (hit == cache_.end()) {
      std::vector<int64_t> word;
      merge_word(piece, word);
      if (cache_.size() >= kMaxCacheEntries) cache_.clear();
      hit = cache_.emplace(std::move(key), std::vector<int32_t>(word.begin(), word.end())).first;
    }
    ids.insert(ids.end(), hit->second.begin(), hit->second.end());
    return;
  }
  merge_word(piece, ids);
}

void BpeModel::merge_word(std::string_view piece, std::vector<int64_t>& ids) const {
  // The initial symbols: one per character (model.rs merge_word).
  std::vector<int64_t> symbols;
  int64_t pending_unk = -1;  // an unknown run not yet added (fused while fuse_unk), or -1
  size_t len = 0;
  std::string s;
  for (size_t i = 0; i < piece.size(); i += len) {
    decode_utf8(piece, i, len);
    s.assign(piece.substr(i, len));
    if (i > 0) s.insert(0, continuing_subword_prefix_);
    if (i + len == piece.size()) s += end_of_word_suffix_;
    if (auto it = vocab_.find(s); it != vocab_.end()) {
      if (pending_unk >= 0) symbols.push_back(pending_unk), pending_unk = -1;
      symbols.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {  // as the reference: a pending unknown run is added after these bytes
        for (char c : s) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (!unk_id_) continue;  // no unknown token: the character is dropped, as the reference drops it
    if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
    pending_unk = *unk_id_;
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);

  // Merges, lowest rank first, then leftmost (word.rs merge_all).
  const size_t n = symbols.size();
  std::vector<int64_t> prev(n), next(n);
  std::vector<bool> removed(n, false);
  for (size_t i = 0; i < n; ++i) prev[i] = static_cast<int64_t>(i) - 1, next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
  struct Merge {
    int32_t rank;
    size_t pos;
    int32_t new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
  auto push_pair = [&](size_t pos) {
    if (next[pos] < 0) return;
    auto m = merges_.find(pair_key(symbols[pos], symbols[static_cast<size_t>(next[pos])]));
    if (m != merges_.end()) queue.push({m->second.first, pos, m->second.second});
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    if (removed[top.pos] || next[top.pos] < 0) continue;
    const auto right = static_cast<size_t>(next[top.pos]);
    auto m = merges_.find(pair_key(symbols[top.pos], symbols[right]));
    if (m == merges_.end() || m->second.second != top.new_id) continue;  // an expired entry
    symbols[top.pos] = top.new_id;
    removed[right] = true;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = static_cast<int64_t>(top.pos);
    if (prev[top.pos] >= 0) push_pair(static_cast<size_t>(prev[top.pos]));
    push_pair(top.pos);
  }
  for (size_t i = 0; i < n; ++i)
    if (!removed[i]) ids.push_back(symbols[i]);
}

}  // namespace strata::data::hf
