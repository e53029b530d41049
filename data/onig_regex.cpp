// The Oniguruma → PCRE2 translation (data/onig_regex.h). `tokenizers` compiles with Oniguruma's
// default syntax, ONIG_SYNTAX_ONIGURUMA, and no options; each construct of that syntax is either
// written as PCRE2 that matches the same text or refused by name:
//
//   Oniguruma                      PCRE2 written (UTF, UCP, NEWLINE_LF, BSR_UNICODE)
//   literal c, \<punct>, \t\n\r\f\a\e, \v (VT only), \x{H}, \uHHHH, \o{O}, \0oo, \ooo, \cX, \C-X
//                                  the code point
//   \xHH / \ooo bytes              ASCII: the code point; >= 0x80: bytes that form one UTF-8 character
//   other \<letter> (\q, \Q, \E…)  the letter itself
//   .  (?m).  \N  \O               [^\n]  (?s:.)  [^\n]  (?s:.)   ((?m) is dotall in Oniguruma)
//   ^  $                           (?m:^) (?m:$): at every line (after/before "\n"), as in Ruby
//   \A \z \Z \G \K \R \X           the same
//   \w \W \d \D \s \S \h \H        Oniguruma's Unicode sets (data/onig_regex_sets.h); \h is a hex
//                                  digit, not horizontal space; (?W) (?D) (?S) make them ASCII
//   \b \B                          look-arounds on Oniguruma's word set
//   [...] [^...] ranges, nested [a[bc]], intersection &&, [:alpha:] [:^alpha:]
//                                  a class, or look-aheads where a class cannot say it
//   \p{..} \P{..} \p{^..}          general categories, scripts (sc:), checked binary properties,
//                                  the POSIX names (Alnum, Word, …) with Oniguruma's sets
//   (..) (?:..) (?<name>..) (?'name'..)  (?:..) — only the whole match is used
//   (?=..) (?!..) (?<=..) (?<!..) (?>..)  the same (PCRE2 10.42 needs fixed-length look-behinds)
//   (?#..)                         dropped
//   (?imxWDS-imxWDS) (?..:..)      i as PCRE2 (?i); m, x, W, D, S applied by the translation; an
//                                  option without ':' runs to the group's end, alternatives included
//                                  (a(?i)b|c is a(?i:b|c))
//   * + ? {n,m} {n,} {,m} and lazy ?  the same; {,m} is {0,m}
//   {n}? {n,m}+ and stacked quantifiers (a**)
//                                  (?:X{n})? (?:X{n,m})+ (?:X*)*: no lazy or possessive intervals
//   {n,m} with n > m               possessive {m,n}+
//   ++ *+ ?+                       possessive, the same
//   Refused: backreferences (\1, \k<..>), subexpression calls (\g<..>), absent groups (?~..),
//   conditionals (?(..)..), callouts (?{..}) (*..), text segments \y \Y and (?y{..}), options P, I,
//   L and C, \M-x, \x{..} code point lists, Unicode blocks \p{In_..} and unchecked properties,
//   repeat counts over 65535, and case-insensitive matching where Oniguruma folds several
//   characters into one ("ss" and "ß", "fi" and "ﬁ") or folds a case-sensitive set ([\p{Lu}]).
// Reference: Oniguruma doc/RE and src/regparse.c (fetch_token, fetch_token_cc, prs_bag,
// fetch_interval, fetch_escaped_value_raw), src/regsyntax.c and regparse.c (OnigSyntaxOniguruma);
// tokenizers tokenizers/src/utils/onig.rs; PCRE2 pcre2pattern(3).
#include "data/onig_regex.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <vector>

#include "data/onig_regex_sets.h"
#include "data/utf8.h"

namespace strata::data::hf {

namespace {

using onig::CharSet;
using onig::SetContext;

struct Refusal {
  std::string what;
};

struct Options {
  bool ignore_case = false, dotall = false, extended = false;
  onig::SetOptions sets;
};

constexpr int kMaxRepeat = 65535;  // PCRE2's limit (Oniguruma's is 100000)

bool is_ascii_alnum(uint32_t c) { return c < 0x80 && std::isalnum(static_cast<int>(c)); }
bool is_octal(char c) { return c >= '0' && c <= '7'; }

void append_hex_escape(std::string& out, uint32_t cp) {
  static const char* digits = "0123456789ABCDEF";
  std::string hex;
  do {
    hex.insert(hex.begin(), digits[cp % 16]);
    cp /= 16;
  } while (cp);
  out += "\\x{" + hex + "}";
}

// One code point as a PCRE2 literal: itself if alphanumeric or non-ASCII, escaped otherwise.
void append_literal(std::string& out, uint32_t cp) {
  if (is_ascii_alnum(cp) || cp >= 0x80) append_utf8(out, cp);
  else if (cp > 0x20 && cp < 0x7F) (out += '\\') += static_cast<char>(cp);
  else append_hex_escape(out, cp);
}

// One code point inside a PCRE2 class.
void append_class_char(std::string& out, uint32_t cp) {
  if (is_ascii_alnum(cp) || cp >= 0x80) append_utf8(out, cp);
  else append_hex_escape(out, cp);
}

// A class under construction: the union of its items, then intersected (&&) operand by operand.
struct ClassOperand {
  std::string body;                       // simple items
  std::vector<std::string> alternatives;  // items no class body can say
  bool empty() const { return body.empty() && alternatives.empty(); }
  std::string pcre2() const {
    if (alternatives.empty()) return "[" + body + "]";
    std::string out = "(?:";
    if (!body.empty()) out += "[" + body + "]|";
    for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? "|" : "") + alternatives[i];
    return out + ")";
  }
};

class Translator {
 public:
  explicit Translator(std::string_view pattern) : p_(pattern) {}
  std::string run() {
    alternatives(Options{});
    if (i_ < p_.size()) refuse("unmatched ')'");
    return out_;
  }
  size_t offset() const { return i_; }

 private:
  [[noreturn]] void refuse(const std::string& what) { throw Refusal{what}; }
  bool at_end() const { return i_ >= p_.size(); }
  char peek(size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : '\0'; }
  bool accept(std::string_view s) {
    if (p_.substr(i_, s.size()) != s) return false;
    i_ += s.size();
    return true;
  }
  uint32_t next_code_point() {
    size_t len = 0;
    const uint32_t cp = decode_utf8(p_, i_, len);
    if (cp == kInvalidCodePoint) refuse("the pattern is not valid UTF-8");
    i_ += len;
    return cp;
  }

  void alternatives(const Options& options);
  void sequence(const Options& options);
  bool atom(const Options& options, std::u32string& folded_run);
  void quantifiers(size_t atom_start, const Options& options);
  bool quantifier(std::string& text);
  struct Interval {
    int low, high;  // high -1: no upper bound
    bool fixed;     // {n}
  };
  std::optional<Interval> interval();
  void skip_extended(const Options& options);
  bool group(const Options& options);
  Options parse_options(Options options, bool& isolated);
  void escape(const Options& options, std::u32string& folded_run);
  uint32_t code_point_escape();
  uint32_t checked_code_point(uint32_t value);
  uint32_t crude_bytes(uint32_t first);
  CharSet property(SetContext where, const Options& options);
  CharSet char_class(const Options& options);  // after the '[' 
  void class_item(const Options& options, ClassOperand& operand);
  std::optional<uint32_t> class_char(const Options& options, ClassOperand& operand);
  std::optional<CharSet> posix_bracket(const Options& options);
  void literal(uint32_t cp, const Options& options, std::u32string& folded_run);

  std::string_view p_;
  size_t i_ = 0;
  std::string out_;
  int groups_ = 0;  // capture groups opened so far (\10 is a backreference only after ten)
};

void Translator::alternatives(const Options& options) {
  for (;;) {
    sequence(options);
    if (at_end() || peek() == ')') return;
    ++i_;  // '|'
    out_ += '|';
  }
}

void Translator::sequence(const Options& options) {
  std::u32string folded_run;  // the case-folded literal characters in a row, for (?i)
  for (;;) {
    skip_extended(options);
    if (at_end() || peek() == '|' || peek() == ')') return;
    const size_t atom_start = out_.size();
    if (peek() == '(' && peek(1) == '?') {
      // An isolated option group takes the rest of the enclosing group, alternatives included.
      const size_t save = i_;
      i_ += 2;
      bool isolated = false;
      if (std::string_view("imxWDSPyICL-").find(peek()) != std::string_view::npos) {
        const Options inner = parse_options(options, isolated);
        if (isolated) {
          out_ += inner.ignore_case == options.ignore_case ? "(?:" : inner.ignore_case ? "(?i:" : "(?-i:";
          alternatives(inner);
          out_ += ')';
          return;
        }
      }
      i_ = save;
    }
    if (!atom(options, folded_run)) continue;  // a comment
    quantifiers(atom_start, options);
  }
}

void Translator::skip_extended(const Options& options) {
  if (!options.extended) return;
  while (!at_end()) {
    size_t len = 0;
    const uint32_t cp = decode_utf8(p_, i_, len);
    if (cp == '#') {
      while (!at_end() && peek() != '\n') ++i_;
    } else if (cp != kInvalidCodePoint && (cp == ' ' || (cp >= 0x9 && cp <= 0xD) || cp == 0x85 || cp == 0xA0 ||
                                           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
                                           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)) {
      i_ += len;  // White_Space
    } else {
      return;
    }
  }
}

// Emits one atom; false when it was only a comment.
bool Translator::atom(const Options& options, std::u32string& folded_run) {
  const char c = peek();
  if (c != '\\' && (c == '(' || c == '[' || c == '.' || c == '^' || c == '$')) folded_run.clear();
  switch (c) {
    case '(': return group(options);
    case '[': ++i_; out_ += char_class(options).pcre2(); return true;
    case '.': ++i_; out_ += options.dotall ? "(?s:.)" : "[^\\n]"; return true;
    case '^': ++i_; out_ += "(?m:^)"; return true;
    case '$': ++i_; out_ += "(?m:$)"; return true;
    case '*': case '+': case '?': refuse("a quantifier with nothing to repeat");
    case '{':
      if (interval()) refuse("a quantifier with nothing to repeat");
      ++i_;
      literal('{', options, folded_run);
      return true;
    case '\\': escape(options, folded_run); return true;
    default: literal(next_code_point(), options, folded_run); return true;
  }
}

void Translator::literal(uint32_t cp, const Options& options, std::u32string& folded_run) {
  if (options.ignore_case) {
    folded_run += onig::case_fold(cp);
    if (onig::ends_with_multi_char_fold(folded_run))
      refuse("case-insensitive text that Oniguruma also matches as one character (multi-character case "
             "folding, such as \"ss\" and \"ß\"), which PCRE2 does not do");
  }
  append_literal(out_, cp);
}

void Translator::quantifiers(size_t atom_start, const Options& options) {
  for (int count = 0;; ++count) {
    skip_extended(options);
    std::string text;
    if (!quantifier(text)) return;
    if (count > 0) {  // a quantifier on a quantified atom repeats the whole of it
      out_.insert(atom_start, "(?:");
      out_ += ')';
    }
    out_ += text;
  }
}

// {n}, {n,}, {n,m}, {,m} at i_ (left there), or nullopt where Oniguruma reads the '{' as a literal.
std::optional<Translator::Interval> Translator::interval() {
  size_t j = i_ + 1;
  auto number = [&](int& value) {
    const size_t start = j;
    value = 0;
    while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j])))
      value = std::min(value * 10 + (p_[j++] - '0'), kMaxRepeat + 1);
    return j > start;
  };
  int low = 0, high = 0;
  const bool has_low = number(low);
  const bool fixed = !(j < p_.size() && p_[j] == ',');
  if (!fixed) {
    ++j;
    if (!number(high)) {
      if (!has_low) return std::nullopt;
      high = -1;
    }
  } else {
    if (!has_low) return std::nullopt;
    high = low;
  }
  if (j >= p_.size() || p_[j] != '}') return std::nullopt;
  if (low > kMaxRepeat || high > kMaxRepeat) refuse("a repeat count over " + std::to_string(kMaxRepeat));
  return Interval{low, high, fixed};
}

// One quantifier with its lazy/possessive suffix, as Oniguruma reads it (fetch_token).
bool Translator::quantifier(std::string& text) {
  const char c = peek();
  if (c == '*' || c == '+' || c == '?') {
    ++i_;
    text = c;
    if (peek() == '?' || peek() == '+') text += p_[i_++];
    return true;
  }
  if (c != '{') return false;
  const auto bounds = interval();
  if (!bounds) return false;
  i_ = p_.find('}', i_) + 1;
  const auto [low, high, fixed] = *bounds;
  if (high >= 0 && low > high) {  // {n,m} with n > m: possessive {m,n}
    text = "{" + std::to_string(high) + "," + std::to_string(low) + "}+";
    return true;
  }
  text = "{" + std::to_string(low) + (fixed ? "" : "," + (high < 0 ? "" : std::to_string(high))) + "}";
  if (!fixed && peek() == '?') text += p_[i_++];  // lazy; {n} is greedy only, {n,m}+ not possessive
  return true;
}


// A group from its '(' on; false for a comment (?#...).
bool Translator::group(const Options& options) {
  ++i_;
  if (peek() == '*') refuse("callouts (*name) are not supported");
  std::string open = "(?:";
  Options inner = options;
  if (accept("?")) {
    const char c = peek();
    if (c == '#') {
      while (!at_end() && peek() != ')') i_ += peek() == '\\' ? 2 : 1;
      if (!accept(")")) refuse("a comment (?# without ')'");
      return false;
    }
    const auto assertion = [&]() -> std::string_view {  // look-arounds and atomic groups, as PCRE2 writes them
      for (std::string_view a : {"=", "!", ">", "<=", "<!"})
        if (accept(a)) return a;
      return {};
    }();
    if (!assertion.empty()) {
      open = "(?" + std::string(assertion);
    } else if (c == '<' || c == '\'') {  // a named group: only the whole match is used
      const size_t close = p_.find(c == '<' ? '>' : '\'', i_ + 1);
      if (close == std::string_view::npos || close == i_ + 1) refuse("a group name without its end");
      i_ = close + 1;
      ++groups_;
    } else if (c == '~') {
      refuse("absent groups (?~...) are not supported");
    } else if (c == '(') {
      refuse("conditionals (?(cond)yes|no) are not supported");
    } else if (c == '{') {
      refuse("callouts (?{...}) are not supported");
    } else if (c == ':') {
      ++i_;
    } else {
      bool isolated = false;
      inner = parse_options(options, isolated);
      if (inner.ignore_case != options.ignore_case) open = inner.ignore_case ? "(?i:" : "(?-i:";
    }
  } else {
    ++groups_;
  }
  out_ += open;
  alternatives(inner);
  if (!accept(")")) refuse("a '(' without ')'");
  out_ += ')';
  return true;
}

// The letters of (?imxWDS-imxWDS) or (?...: after "(?", through the ')' or ':'.
Options Translator::parse_options(Options options, bool& isolated) {
  bool on = true;
  for (;;) {
    if (at_end()) refuse("an option group without ')'");
    const char c = p_[i_++];
    switch (c) {
      case ':': isolated = false; return options;
      case ')': isolated = true; return options;
      case '-': on = false; break;
      case 'i': options.ignore_case = on; break;
      case 'm': options.dotall = on; break;  // Oniguruma's (?m) is dot-all (ONIG_OPTION_MULTILINE)
      case 'x': options.extended = on; break;
      case 'W': options.sets.ascii_word = on; break;
      case 'D': options.sets.ascii_digit = on; break;
      case 'S': options.sets.ascii_space = on; break;
      case 'P': refuse("the option (?P) (ASCII POSIX brackets) is not supported");
      case 'y': refuse("text segment options (?y{g}) and (?y{w}) are not supported");
      case 'I': case 'L': case 'C': refuse(std::string("the whole-pattern option (?") + c + ") is not supported");
      default: refuse(std::string("unknown group option '") + c + "'");
    }
  }
}

void Translator::escape(const Options& options, std::u32string& folded_run) {
  ++i_;
  if (at_end()) refuse("the pattern ends with '\\'");
  const char e = peek();
  const auto case_sensitive = [&](const std::string& text) {  // Oniguruma does not fold \w or \p{} outside a class
    return options.ignore_case ? "(?-i:" + text + ")" : text;
  };
  if (std::string_view("wWsSdDhHbBpPAzZGKRXNOyYkgM").find(e) != std::string_view::npos) folded_run.clear();
  switch (e) {
    case 'w': case 'W': case 's': case 'S': case 'd': case 'D': case 'h': case 'H':
      ++i_;
      out_ += case_sensitive(onig::escape_set(e, SetContext::Outside, options.sets).pcre2());
      return;
    case 'b': case 'B': {
      ++i_;
      const std::string w = onig::escape_set('w', SetContext::Outside, options.sets).pcre2();
      out_ += case_sensitive(e == 'b' ? "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))"
                                      : "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))");
      return;
    }
    case 'p': case 'P': out_ += case_sensitive(property(SetContext::Outside, options).pcre2()); return;
    case 'A': case 'z': case 'Z': case 'G': case 'K': case 'R': case 'X':
      ++i_;
      (out_ += '\\') += e;
      return;
    case 'N': ++i_; out_ += "[^\\n]"; return;
    case 'O': ++i_; out_ += "(?s:.)"; return;
    case 'y': case 'Y': refuse("text segment boundaries \\y and \\Y are not supported");
    case 'k': refuse("backreferences (\\k<name>) are not supported");
    case 'g': refuse("subexpression calls (\\g<name>) are not supported");
    default: break;
  }
  if (e >= '1' && e <= '9') {
    const size_t start = i_;
    int number = 0;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(peek())) && number < 1000) number = number * 10 + (p_[i_++] - '0');
    if (number <= 9 || number <= groups_) refuse("backreferences (\\" + std::to_string(number) + ") are not supported");
    i_ = start;
    if (e == '8' || e == '9') {  // a literal digit
      ++i_;
      literal(static_cast<uint32_t>(e), options, folded_run);
      return;
    }
  }
  literal(code_point_escape(), options, folded_run);
}

// The code point of a character escape at i_ (after the '\'); \b here is the backspace of a class.
uint32_t Translator::code_point_escape() {
  const char e = p_[i_++];
  auto hex_digits = [&](size_t max_digits, uint32_t& value) {
    size_t n = 0;
    value = 0;
    while (n < max_digits && !at_end() && std::isxdigit(static_cast<unsigned char>(peek()))) {
      const char d = p_[i_++];
      value = value * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(d)) ? d - '0' : std::tolower(d) - 'a' + 10);
      ++n;
    }
    return n;
  };
  switch (e) {
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'a': return 7;
    case 'e': return 27;
    case 'v': return 11;  // VT: Oniguruma's \v is not PCRE2's vertical-space class
    case 'b': return 8;   // in a class
    case 'x': {
      uint32_t value = 0;
      if (accept("{")) {
        if (hex_digits(8, value) == 0 || !accept("}")) refuse("\\x{...} with other than one hexadecimal code point");
        return checked_code_point(value);
      }
      hex_digits(2, value);
      return crude_bytes(value);
    }
    case 'u': {
      uint32_t value = 0;
      if (hex_digits(4, value) != 4) refuse("\\u without four hexadecimal digits");
      return checked_code_point(value);
    }
    case 'o': {
      if (!accept("{")) return 'o';
      uint32_t value = 0;
      size_t n = 0;
      while (!at_end() && is_octal(peek()) && n++ < 11) value = value * 8 + static_cast<uint32_t>(p_[i_++] - '0');
      if (n == 0 || !accept("}")) refuse("\\o{...} with other than one octal code point");
      return checked_code_point(value);
    }
    case 'c': case 'C': {
      if (e == 'C' && !accept("-")) return 'C';
      if (at_end() || peek() == '\\' || static_cast<unsigned char>(peek()) >= 0x80) refuse("a \\c or \\C- control escape Strata does not read");
      const char x = p_[i_++];
      return x == '?' ? 0x7F : static_cast<uint32_t>(x) & 0x9F;
    }
    case 'M': refuse("meta escapes \\M-x are not supported");
    default: break;
  }
  if (is_octal(e)) {  // \0oo, \ooo: up to three octal digits (a backreference was ruled out)
    uint32_t value = static_cast<uint32_t>(e - '0');
    for (size_t n = 0; n < 2 && !at_end() && is_octal(peek()); ++n) value = value * 8 + static_cast<uint32_t>(p_[i_++] - '0');
    if (value >= 256) refuse("an octal escape over \\377");
    return crude_bytes(value);
  }
  --i_;
  return next_code_point();  // any other escaped character is itself
}

uint32_t Translator::checked_code_point(uint32_t value) {
  if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) refuse("an escape that is not a Unicode scalar value");
  return value;
}

// A raw byte from \xHH or an octal escape: ASCII stands for itself; a UTF-8 lead byte takes the
// continuation bytes from the escapes that follow (Oniguruma reads them as one character).
uint32_t Translator::crude_bytes(uint32_t first) {
  if (first < 0x80) return first;
  std::string bytes(1, static_cast<char>(first));
  const size_t need = first >= 0xF0 ? 4 : first >= 0xE0 ? 3 : first >= 0xC0 ? 2 : 0;
  while (need && bytes.size() < need && peek() == '\\' && (peek(1) == 'x' || is_octal(peek(1)))) {
    ++i_;
    uint32_t value = 0;
    if (accept("x")) {
      for (size_t n = 0; n < 2 && std::isxdigit(static_cast<unsigned char>(peek())); ++n) {
        const char d = p_[i_++];
        value = value * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(d)) ? d - '0' : std::tolower(d) - 'a' + 10);
      }
    } else {
      for (size_t n = 0; n < 3 && is_octal(peek()); ++n) value = value * 8 + static_cast<uint32_t>(p_[i_++] - '0');
    }
    bytes += static_cast<char>(value);
  }
  size_t len = 0;
  const uint32_t cp = need ? decode_utf8(bytes, 0, len) : kInvalidCodePoint;
  if (cp == kInvalidCodePoint || len != bytes.size()) refuse("\\x or octal byte escapes that do not form one UTF-8 character");
  return cp;
}

// \p{name}, \P{name}, \p{^name} at i_ (on the 'p').
CharSet Translator::property(SetContext where, const Options& options) {
  bool negated = p_[i_++] == 'P';
  if (!accept("{")) refuse("\\p or \\P without {name}");
  if (accept("^")) negated = !negated;
  const size_t close = p_.find('}', i_);
  if (close == std::string_view::npos) refuse("\\p{ without '}'");
  const std::string_view name = p_.substr(i_, close - i_);
  i_ = close + 1;
  if (where == SetContext::InClass && options.ignore_case && onig::is_case_sensitive_set_name(name))
    refuse("case-insensitive [\\p{" + std::string(name) + "}]: Oniguruma folds the class, PCRE2 does not");
  std::string error;
  const auto set = onig::property_set(name, where, options.sets, error);
  if (!set) refuse(error);
  return negated ? set->complement() : *set;
}


// A class from after its '[' through its ']': the union of its items, intersected at each &&.
CharSet Translator::char_class(const Options& options) {
  const bool negated = accept("^");
  std::vector<ClassOperand> operands(1);
  for (bool first = true;; first = false) {
    if (at_end()) refuse("a '[' without ']'");
    if (peek() == ']' && !first) break;  // a ']' first is a literal
    if (accept("&&")) {
      operands.emplace_back();
      continue;
    }
    class_item(options, operands.back());
  }
  ++i_;
  for (const ClassOperand& o : operands)
    if (o.empty()) refuse("an empty side of && in a class");
  if (operands.size() == 1 && operands[0].alternatives.empty()) return CharSet{operands[0].body, negated, {}};
  std::string expr = operands.size() == 1 ? operands[0].pcre2() : "(?:";
  if (operands.size() > 1) {  // A && B && C: one character that each look-ahead agrees on
    for (size_t k = 0; k + 1 < operands.size(); ++k) expr += "(?=" + operands[k].pcre2() + ")";
    expr += operands.back().pcre2() + ")";
  }
  const CharSet set{{}, false, expr};
  return negated ? set.complement() : set;
}

void add_set(ClassOperand& operand, const CharSet& set) {
  if (set.is_simple() && !set.negated) operand.body += set.body;
  else operand.alternatives.push_back(set.pcre2());
}

// One item of a class: a character, a range, a set escape, a POSIX bracket or a nested class.
void Translator::class_item(const Options& options, ClassOperand& operand) {
  if (peek() == '[') {
    if (auto set = posix_bracket(options)) {
      add_set(operand, *set);
      return;
    }
    ++i_;
    add_set(operand, char_class(options));
    return;
  }
  const auto from = class_char(options, operand);
  const bool range = peek() == '-' && peek(1) != ']' && peek(1) != '\0';
  if (!from) {
    if (range) refuse("a class range that starts at a set ([\\w-z])");
    return;
  }
  uint32_t to = *from;
  if (range) {
    ++i_;
    if (peek() == '[') refuse("a class range that ends at a class");
    const auto end = class_char(options, operand);
    if (!end) refuse("a class range that ends at a set ([a-\\w])");
    if (*end < *from) refuse("an empty class range");
    to = *end;
  }
  if (options.ignore_case && onig::range_has_multi_char_fold(*from, to))
    refuse("a case-insensitive class with a character that Oniguruma also matches as several (multi-character "
           "case folding, such as \"ß\" and \"ss\"), which PCRE2 does not do");
  append_class_char(operand.body, *from);
  if (to != *from) {
    operand.body += '-';
    append_class_char(operand.body, to);
  }
}

// A character of a class at i_, or nullopt for a set escape (added to `operand`).
std::optional<uint32_t> Translator::class_char(const Options& options, ClassOperand& operand) {
  if (peek() != '\\') return next_code_point();
  ++i_;
  if (at_end()) refuse("the pattern ends with '\\'");
  const char e = peek();
  if (std::string_view("wWsSdDhH").find(e) != std::string_view::npos) {
    ++i_;
    add_set(operand, onig::escape_set(e, SetContext::InClass, options.sets));
    return std::nullopt;
  }
  if ((e == 'p' || e == 'P') && peek(1) == '{') {
    add_set(operand, property(SetContext::InClass, options));
    return std::nullopt;
  }
  if (std::string_view("89").find(e) != std::string_view::npos) return static_cast<uint32_t>(p_[i_++]);
  return code_point_escape();
}

// [:name:] or [:^name:] at i_ (on the '['), or nullopt where the '[' opens a nested class.
std::optional<CharSet> Translator::posix_bracket(const Options& options) {
  if (peek(1) != ':') return std::nullopt;
  size_t j = i_ + 2;
  const bool negated = j < p_.size() && p_[j] == '^';
  if (negated) ++j;
  const size_t name_start = j;
  while (j < p_.size() && std::isalpha(static_cast<unsigned char>(p_[j]))) ++j;
  if (j == name_start || p_.substr(j, 2) != ":]") return std::nullopt;
  const std::string_view name = p_.substr(name_start, j - name_start);
  if (options.ignore_case && onig::is_case_sensitive_set_name(name))
    refuse("case-insensitive [[:" + std::string(name) + ":]]: Oniguruma folds the class, PCRE2 does not");
  const auto set = onig::posix_bracket_set(name, options.sets);
  if (!set) refuse("unknown POSIX bracket [:" + std::string(name) + ":]");
  i_ = j + 2;
  return negated ? set->complement() : *set;
}

}  // namespace

OnigTranslation onig_to_pcre2(std::string_view pattern) {
  Translator t(pattern);
  try {
    return OnigTranslation{t.run(), {}};
  } catch (const Refusal& r) {
    return OnigTranslation{{}, r.what + " (at byte " + std::to_string(t.offset()) + " of the pattern)"};
  }
}

}  // namespace strata::data::hf
