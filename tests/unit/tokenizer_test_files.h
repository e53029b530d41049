// A hand-built tokenizer.json for the tokenizer tests (test_tokenizer_hf.cpp, test_hf_import.cpp):
// SentencePiece-style BPE (Prepend + Replace normalizers, ▁ words, byte fallback, a fused
// unknown token), the template "<s> $A </s>", an lstrip/rstrip added token [SEP] (id 11), and
// the Replace/ByteFallback/Fuse/Strip decoders; 12 ids, EOS </s> = 2, BOS <s> = 1. And a
// TikTokenizer vocabulary in Megatron's JSON format (test_tokenizer_tiktoken.cpp,
// test_checkpoint_tokenizer.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::test {

using json = nlohmann::json;

// A SentencePiece-style BPE: ▁ words, byte fallback, a fused unknown token, "<s> $A </s>".
inline json sp_style_tokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\u2581", 3}, {"a", 4}, {"b", 5},
                {"ab", 6}, {"\u2581ab", 7}, {"<0xC3>", 8}, {"<0xA9>", 9}, {"x", 10}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
            {{"id", 11}, {"content", "[SEP]"}, {"special", false}, {"normalized", false}, {"lstrip", true},
             {"rstrip", true}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\u2581"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
          {"pre_tokenizer", nullptr},
          {"model",
           {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
            {"vocab", vocab}, {"merges", {"a b", json::array({"\u2581", "ab"})}}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
            {"special_tokens",
             {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
              {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}}}}}};
}

inline const char* kSpecials = R"({"eos_token": "</s>", "bos_token": {"content": "<s>"}})";


inline std::string base64(const std::string& bytes) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += a[v >> 18 & 63];
    out += a[v >> 12 & 63];
    out += i + 1 < bytes.size() ? a[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? a[v & 63] : '=';
  }
  return out;
}

// Megatron's TikTokenizer vocabulary JSON: the 256 bytes, then `extra` (ranks 256, 257, …).
inline std::string tiktoken_vocab_json(const std::vector<std::string>& extra) {
  std::string out = "[";
  for (size_t k = 0; k < 256 + extra.size(); ++k) {
    const std::string t = k < 256 ? std::string(1, static_cast<char>(k)) : extra[k - 256];
    out += (k ? ", " : "") + std::string("{\"rank\": ") + std::to_string(k) + ", \"token_bytes\": \"" + base64(t) +
           "\", \"token_str\": \"x\"}";
  }
  return out + "]";
}

}  // namespace strata::test
