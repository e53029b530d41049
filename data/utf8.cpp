// UTF-8 decoding, encoding and lossy repair (data/utf8.h).
// Reference: The Unicode Standard 15.0, §3.9 (Table 3-7, well-formed byte sequences; U+FFFD
// substitution of maximal subparts).
#include "data/utf8.h"

namespace strata::data {

uint32_t decode_utf8(std::string_view s, size_t i, size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  len = 1;
  if (b0 < 0x80) return b0;
  // Table 3-7: the byte count and the range allowed for the second byte.
  size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;
  uint32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, cp = b0 & 0x1F;
  else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, cp = b0 & 0x0F, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
  else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, cp = b0 & 0x07, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
  else return kInvalidCodePoint;
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return kInvalidCodePoint;  // truncated: len = the subpart so far
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80u) || b > (k == 1 ? hi : 0xBFu)) return kInvalidCodePoint;
    cp = (cp << 6) | (b & 0x3F);
    len = k + 1;
  }
  len = n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len)
    if (decode_utf8(s, i, len) == kInvalidCodePoint) return false;
  return true;
}

std::string utf8_replace_invalid(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    if (decode_utf8(s, i, len) == kInvalidCodePoint) out += kReplacementCharacter;
    else out.append(s.substr(i, len));
  }
  return out;
}

}  // namespace strata::data
