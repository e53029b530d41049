// UTF-8 code points for the tokenizers: decoding one code point, encoding one, and the lossy
// conversion of arbitrary bytes to valid UTF-8 that every model tokenizer applies to its input.
// The lossy rule is the Unicode "maximal subpart" practice (Unicode 15, §3.9 U+FFFD substitution),
// the one Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy follow:
// each maximal prefix of a well-formed sequence that cannot be completed, and each byte that
// starts none, becomes one U+FFFD.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::data {

inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// The code point starting at s[i]; `len` is its byte length. An ill-formed sequence gives
// kInvalidCodePoint with len = the length of its maximal subpart (at least 1).
uint32_t decode_utf8(std::string_view s, size_t i, size_t& len);
void append_utf8(std::string& out, uint32_t cp);
// Whether `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);
// `s` with every ill-formed maximal subpart replaced by U+FFFD (a copy of `s` when it is valid).
std::string utf8_replace_invalid(std::string_view s);

}  // namespace strata::data
