// Oniguruma's character sets in PCRE2 terms (for data/onig_regex.cpp): the escapes \w \s \d \h,
// POSIX brackets and \p{...} properties, as sets of code points written as PCRE2 class bodies, and
// the characters whose full case folding has several characters (Oniguruma's case-insensitive
// matching folds "ss" to "ß", PCRE2 does not). Oniguruma's sets are its Unicode tables: Word is
// Alphabetic | Mark | Decimal_Number | Connector_Punctuation, Alnum Alphabetic | Decimal_Number,
// Graph everything but White_Space, Cc, Cs and Cn, and so on (add_posix_props); outside a class
// \w, \W, \b, \B and \p{Word} read the Latin-1 ctype table, which also counts ¹ ² ³ ¼ ½ ¾ as word
// characters (EncUNICODE_ISO_8859_1_CtypeTable).
// Reference: Oniguruma src/make_unicode_property_data.py (add_posix_props), src/unicode.c,
// doc/RE ("Character Property", "POSIX bracket"); PCRE2 pcre2pattern(3) ("Unicode character properties").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::data::hf::onig {

// A set of code points as PCRE2 text: a class body ("\p{L}0-9") matched by [body] or, negated,
// [^body]; or, where no class body can say it, `composite`: a PCRE2 expression that matches one
// character of the set.
struct CharSet {
  std::string body;
  bool negated = false;
  std::string composite;
  bool is_simple() const { return composite.empty(); }
  std::string pcre2() const;  // the set as a PCRE2 expression matching one character
  CharSet complement() const;
};

// Where a set is used: outside a class, \w and \p{Word} read the Latin-1 table; in a class, not.
enum class SetContext { Outside, InClass };

// The inline options that change a set: (?W) ASCII word, (?D) ASCII digit, (?S) ASCII space.
struct SetOptions {
  bool ascii_word = false, ascii_digit = false, ascii_space = false;
};

// \w \W \s \S \d \D \h \H (`letter` is the escape's letter).
CharSet escape_set(char letter, SetContext where, const SetOptions& options);
// [:name:] (name as written, "alpha"); nullopt for a name Oniguruma does not have.
std::optional<CharSet> posix_bracket_set(std::string_view name, const SetOptions& options);
// \p{name}: a POSIX name, a general category, a binary property Strata has checked, or a script.
// nullopt when the name is none of them; `error` then says why.
std::optional<CharSet> property_set(std::string_view name, SetContext where, const SetOptions& options,
                                    std::string& error);
// Whether the property or bracket differs between its case-folded closure (what Oniguruma matches
// in a case-insensitive class) and itself (what PCRE2 matches): the upper/lower case sets.
bool is_case_sensitive_set_name(std::string_view name);

// The full case folding of `cp` when it has several characters ("ß" → "ss"), else empty.
std::u32string multi_char_fold(uint32_t cp);
// The simple-or-full case folding of `cp` (one character, or several for the characters above).
std::u32string case_fold(uint32_t cp);
// Whether [first, last] holds a character whose full case folding has several characters.
bool range_has_multi_char_fold(uint32_t first, uint32_t last);
// Whether `folded` (a case-folded literal run) ends with the full folding of some character that
// folds to several ("ss", "fi", …): Oniguruma then also matches that one character.
bool ends_with_multi_char_fold(const std::u32string& folded);

}  // namespace strata::data::hf::onig
