// Oniguruma's character sets as PCRE2 class bodies (data/onig_regex_sets.h).
// Reference: Oniguruma src/make_unicode_property_data.py (add_posix_props: Word, Alnum, Graph,
// Print, Blank, PosixPunct), src/unicode.c (EncUNICODE_ISO_8859_1_CtypeTable), doc/RE;
// PCRE2 pcre2pattern(3) (property names: general categories by their short names, binary
// properties, sc: for the Script property); Unicode CaseFolding.txt (status F) through utf8proc.
#include "data/onig_regex_sets.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

namespace strata::data::hf::onig {

namespace {

// Alphabetic and Lowercase with the characters that became so after PCRE2 10.42's Unicode 14 and
// are in Oniguruma's tables (Unicode 16: combining letters U+0363..U+036F, U+1DD3..U+1DE6, …).
constexpr std::string_view kAlphabeticBody =
    "\\p{Alphabetic}\\x{363}-\\x{36F}\\x{C04}\\x{F82}\\x{F83}\\x{1DD3}-\\x{1DE6}\\x{11080}\\x{11081}";
constexpr std::string_view kLowercaseBody = "\\p{Lowercase}\\x{10FC}\\x{A7F2}-\\x{A7F4}\\x{AB69}";
// Word = Alphabetic | Mark | Decimal_Number | Connector_Punctuation (add_posix_props).
constexpr std::string_view kWordBody = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
// What the Latin-1 ctype table adds to Word outside a class: ² ³ ¹ ¼ ½ ¾.
constexpr std::string_view kLatin1WordExtra = "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
constexpr std::string_view kAsciiWordBody = "0-9A-Za-z_";
constexpr std::string_view kAsciiSpaceBody = "\\x{9}-\\x{D} ";

std::string lowered_without_separators(std::string_view name) {  // Oniguruma's loose property names
  std::string out;
  for (char c : name)
    if (c != ' ' && c != '_' && c != '-') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

CharSet positive(std::string body) { return CharSet{std::move(body), false, {}}; }
CharSet negative(std::string body) { return CharSet{std::move(body), true, {}}; }

// The sets Oniguruma names both as POSIX brackets and as properties, by lowered name.
std::optional<CharSet> posix_named_set(const std::string& name, SetContext where, const SetOptions& options) {
  if (name == "word") {
    if (options.ascii_word) return positive(std::string(kAsciiWordBody));
    return positive(std::string(kWordBody) + (where == SetContext::Outside ? std::string(kLatin1WordExtra) : ""));
  }
  if (name == "alpha") return positive(std::string(kAlphabeticBody));
  if (name == "alnum") return positive(std::string(kAlphabeticBody) + "\\p{Nd}");
  if (name == "digit") return positive(options.ascii_digit ? "0-9" : "\\p{Nd}");
  if (name == "space") return positive(options.ascii_space ? std::string(kAsciiSpaceBody) : "\\p{White_Space}");
  if (name == "xdigit") return positive("0-9A-Fa-f");
  if (name == "upper") return positive("\\p{Uppercase}");
  if (name == "lower") return positive(std::string(kLowercaseBody));
  if (name == "blank") return positive("\\x{9}\\p{Zs}");
  if (name == "cntrl") return positive("\\p{Cc}");
  if (name == "ascii") return positive("\\x{0}-\\x{7F}");
  // Graph: all but White_Space, Cc, Cs, Cn (every Z is White_Space); Print: Graph and Zs.
  if (name == "graph") return negative("\\p{Z}\\p{Cc}\\p{Cs}\\p{Cn}");
  if (name == "print") return negative("\\p{Zl}\\p{Zp}\\p{Cc}\\p{Cs}\\p{Cn}");
  return std::nullopt;
}

struct NamePair {
  std::string_view lowered, pcre2;
};

// General categories, long and short names, as PCRE2 10.42 spells them (short names only).
constexpr std::array kGeneralCategories = {
    NamePair{"l", "L"}, NamePair{"letter", "L"}, NamePair{"lu", "Lu"}, NamePair{"uppercaseletter", "Lu"},
    NamePair{"ll", "Ll"}, NamePair{"lowercaseletter", "Ll"}, NamePair{"lt", "Lt"}, NamePair{"titlecaseletter", "Lt"},
    NamePair{"lm", "Lm"}, NamePair{"modifierletter", "Lm"}, NamePair{"lo", "Lo"}, NamePair{"otherletter", "Lo"},
    NamePair{"lc", "L&"}, NamePair{"casedletter", "L&"}, NamePair{"m", "M"}, NamePair{"mark", "M"},
    NamePair{"combiningmark", "M"}, NamePair{"mn", "Mn"}, NamePair{"nonspacingmark", "Mn"}, NamePair{"mc", "Mc"},
    NamePair{"spacingmark", "Mc"}, NamePair{"me", "Me"}, NamePair{"enclosingmark", "Me"}, NamePair{"n", "N"},
    NamePair{"number", "N"}, NamePair{"nd", "Nd"}, NamePair{"decimalnumber", "Nd"}, NamePair{"nl", "Nl"},
    NamePair{"letternumber", "Nl"}, NamePair{"no", "No"}, NamePair{"othernumber", "No"}, NamePair{"p", "P"},
    NamePair{"punctuation", "P"}, NamePair{"pc", "Pc"}, NamePair{"connectorpunctuation", "Pc"}, NamePair{"pd", "Pd"},
    NamePair{"dashpunctuation", "Pd"}, NamePair{"ps", "Ps"}, NamePair{"openpunctuation", "Ps"}, NamePair{"pe", "Pe"},
    NamePair{"closepunctuation", "Pe"}, NamePair{"pi", "Pi"}, NamePair{"initialpunctuation", "Pi"},
    NamePair{"pf", "Pf"}, NamePair{"finalpunctuation", "Pf"}, NamePair{"po", "Po"},
    NamePair{"otherpunctuation", "Po"}, NamePair{"s", "S"}, NamePair{"symbol", "S"}, NamePair{"sm", "Sm"},
    NamePair{"mathsymbol", "Sm"}, NamePair{"sc", "Sc"}, NamePair{"currencysymbol", "Sc"}, NamePair{"sk", "Sk"},
    NamePair{"modifiersymbol", "Sk"}, NamePair{"so", "So"}, NamePair{"othersymbol", "So"}, NamePair{"z", "Z"},
    NamePair{"separator", "Z"}, NamePair{"zs", "Zs"}, NamePair{"spaceseparator", "Zs"}, NamePair{"zl", "Zl"},
    NamePair{"lineseparator", "Zl"}, NamePair{"zp", "Zp"}, NamePair{"paragraphseparator", "Zp"},
    NamePair{"c", "C"}, NamePair{"other", "C"}, NamePair{"cc", "Cc"}, NamePair{"control", "Cc"},
    NamePair{"cf", "Cf"}, NamePair{"format", "Cf"}, NamePair{"cs", "Cs"}, NamePair{"surrogate", "Cs"},
    NamePair{"co", "Co"}, NamePair{"privateuse", "Co"}, NamePair{"cn", "Cn"}, NamePair{"unassigned", "Cn"},
};

// Binary properties whose PCRE2 set is Oniguruma's (up to the Unicode versions).
constexpr std::array kBinaryProperties = {
    NamePair{"alphabetic", "Alphabetic"}, NamePair{"uppercase", "Uppercase"}, NamePair{"lowercase", "Lowercase"},
    NamePair{"whitespace", "White_Space"}, NamePair{"emoji", "Emoji"},
    NamePair{"emojipresentation", "Emoji_Presentation"}, NamePair{"extendedpictographic", "Extended_Pictographic"},
    NamePair{"ideographic", "Ideographic"}, NamePair{"math", "Math"}, NamePair{"dash", "Dash"},
    NamePair{"hexdigit", "Hex_Digit"}, NamePair{"asciihexdigit", "ASCII_Hex_Digit"},
    NamePair{"joincontrol", "Join_Control"}, NamePair{"regionalindicator", "Regional_Indicator"},
};

std::optional<std::string_view> find_name(std::string_view lowered, const auto& table) {
  for (const NamePair& p : table)
    if (p.lowered == lowered) return p.pcre2;
  return std::nullopt;
}

bool is_script_name(const std::string& lowered) {  // letters only; PCRE2 checks the name itself
  return !lowered.empty() && std::all_of(lowered.begin(), lowered.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

}  // namespace

std::string CharSet::pcre2() const {
  if (!is_simple()) return composite;
  return (negated ? "[^" : "[") + body + "]";
}

CharSet CharSet::complement() const {
  if (is_simple()) return CharSet{body, !negated, {}};
  return CharSet{{}, false, "(?:(?!" + composite + ")(?s:.))"};
}

CharSet escape_set(char letter, SetContext where, const SetOptions& options) {
  const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(letter)));
  const std::string name = lower == 'w' ? "word" : lower == 's' ? "space" : lower == 'd' ? "digit" : "xdigit";
  CharSet set = *posix_named_set(name, where, options);
  return letter == lower ? set : set.complement();
}

std::optional<CharSet> posix_bracket_set(std::string_view name, const SetOptions& options) {
  const std::string n(name);
  if (n == "punct") return positive("\\p{P}\\p{S}");  // PosixPunct: Punctuation | Symbol
  return posix_named_set(n, SetContext::InClass, options);
}

std::optional<CharSet> property_set(std::string_view name, SetContext where, const SetOptions& options,
                                    std::string& error) {
  const std::string lowered = lowered_without_separators(name);
  if (lowered == "any") return positive("\\x{0}-\\x{10FFFF}");
  if (lowered == "assigned") return negative("\\p{Cn}");
  if (lowered == "punct") return positive("\\p{P}");  // the property is Punctuation, the bracket PosixPunct
  if (auto set = posix_named_set(lowered, where, options)) return set;
  if (lowered == "alphabetic") return positive(std::string(kAlphabeticBody));
  if (lowered == "lowercase") return positive(std::string(kLowercaseBody));
  if (auto gc = find_name(lowered, kGeneralCategories)) return positive("\\p{" + std::string(*gc) + "}");
  if (auto bp = find_name(lowered, kBinaryProperties)) return positive("\\p{" + std::string(*bp) + "}");
  if (lowered.rfind("in", 0) == 0 && name.size() > 3 && name[2] == '_') {
    error = "the Unicode block property \\p{" + std::string(name) + "} is not supported";
    return std::nullopt;
  }
  if (is_script_name(lowered)) return positive("\\p{sc:" + lowered + "}");  // Oniguruma's \p{Greek} is Script=Greek
  error = "the property \\p{" + std::string(name) + "} is not supported";
  return std::nullopt;
}

bool is_case_sensitive_set_name(std::string_view name) {
  static const std::vector<std::string> kNames = {"upper", "lower", "uppercase", "lowercase", "lu", "ll", "lt",
                                                  "uppercaseletter", "lowercaseletter", "titlecaseletter"};
  const std::string lowered = lowered_without_separators(name);
  return std::find(kNames.begin(), kNames.end(), lowered) != kNames.end();
}

std::u32string case_fold(uint32_t cp) {
  utf8proc_int32_t folded[8];
  int last = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), folded, 8,
                                                     UTF8PROC_CASEFOLD, &last);
  if (n <= 0 || n > 8) return std::u32string(1, static_cast<char32_t>(cp));
  std::u32string out;
  for (utf8proc_ssize_t i = 0; i < n; ++i) out += static_cast<char32_t>(folded[i]);
  return out;
}

std::u32string multi_char_fold(uint32_t cp) {
  std::u32string f = case_fold(cp);
  return f.size() > 1 ? f : std::u32string();
}

namespace {

// The characters whose full case folding has several characters, all below U+1F000
// (CaseFolding.txt, status F), and those foldings.
struct MultiCharFolds {
  std::vector<uint32_t> characters;
  std::vector<std::u32string> folds;
};

const MultiCharFolds& multi_char_folds() {
  static const MultiCharFolds kFolds = [] {
    MultiCharFolds out;
    for (uint32_t cp = 0; cp < 0x1F000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const std::u32string f = multi_char_fold(cp);
      if (f.empty()) continue;
      out.characters.push_back(cp);
      if (std::find(out.folds.begin(), out.folds.end(), f) == out.folds.end()) out.folds.push_back(f);
    }
    return out;
  }();
  return kFolds;
}

}  // namespace

bool range_has_multi_char_fold(uint32_t first, uint32_t last) {
  for (uint32_t cp : multi_char_folds().characters)
    if (cp >= first && cp <= last) return true;
  return false;
}

bool ends_with_multi_char_fold(const std::u32string& folded) {
  for (const std::u32string& f : multi_char_folds().folds)
    if (folded.size() >= f.size() && folded.compare(folded.size() - f.size(), f.size(), f) == 0) return true;
  return false;
}

}  // namespace strata::data::hf::onig
