// Oniguruma regexes, as Hugging Face `tokenizers` runs them, on PCRE2: the translation of a
// pattern into a PCRE2 pattern that matches the same text (or a refusal naming the construct it
// cannot translate), and the match iteration of the `onig` crate, empty matches included.
// `tokenizers` compiles every Split/Replace pattern with `onig::Regex::new` (tokenizers/src/utils/
// onig.rs): Oniguruma's default syntax ONIG_SYNTAX_ONIGURUMA, ONIG_OPTION_NONE, UTF-8, and iterates
// with `find_iter` (rust-onig onig/src/find.rs, FindMatches::next). The construct-by-construct
// mapping is in data/onig_regex.cpp's header and docs/tokenizers.md.
// Reference: Oniguruma doc/RE and src/regparse.c (fetch_token, fetch_token_cc, prs_bag, fetch_interval),
// src/make_unicode_property_data.py (add_posix_props); PCRE2 pcre2pattern(3).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::data::hf {

// A byte range [begin, end) of a string.
using ByteRange = std::pair<size_t, size_t>;

// The PCRE2 pattern that matches what Oniguruma matches for `pattern`; or, with `pcre2` empty,
// `error`: the construct Strata does not translate (or Oniguruma rejects) and its byte offset.
struct OnigTranslation {
  std::string pcre2;
  std::string error;
};
OnigTranslation onig_to_pcre2(std::string_view pattern);

// A translated pattern compiled by PCRE2 (UTF, UCP, LF newlines, Unicode \R, JIT).
class OnigRegex {
 public:
  explicit OnigRegex(std::string_view pattern);  // check error() before use
  ~OnigRegex();
  OnigRegex(const OnigRegex&) = delete;
  OnigRegex& operator=(const OnigRegex&) = delete;
  // Empty once the pattern compiled; else why it did not.
  const std::string& error() const { return error_; }
  const std::string& pcre2_pattern() const { return pcre2_; }
  // The matches of `onig`'s find_iter, left to right: each search starts where the previous match
  // ended, and an empty match at the end of the previous match is skipped by moving one character
  // on. Appends to `out`; returns 0, or the PCRE2 error code (< 0) that stopped the search.
  int find_all(std::string_view text, std::vector<ByteRange>& out) const;
  // PCRE2's message for an error code find_all returned.
  static std::string match_error_message(int code);

 private:
  std::string pcre2_, error_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace strata::data::hf
