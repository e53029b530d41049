// tokenizer.json regexes with Oniguruma's semantics (data/onig_regex.h): empty matches under every
// Split behaviour and invert, the onig crate's match iteration, the escapes and options whose
// meaning differs from PCRE2's (\h, \v, ^ $, (?m), isolated options, {n}?, \w outside a class,
// [[:punct:]], nested classes, scripts), the refused constructs, and a match-limit failure that
// names the file, the JSON path and the text.
// Reference: hand-computed from huggingface/tokenizers tokenizer/pattern.rs (find_matches),
// tokenizer/normalizer.rs (split, replace) and rust-onig onig/src/find.rs (FindMatches::next), and
// Oniguruma doc/RE, src/regparse.c; each value agrees with tokenizers 0.23.3.
#include <catch2/catch.hpp>

#include <memory>
#include <nlohmann/json.hpp>

#include "data/onig_regex.h"
#include "data/tokenizer_hf_parts.h"

using namespace strata::data::hf;
using Catch::Matchers::Contains;
using json = nlohmann::json;
using Pieces = std::vector<std::string>;

namespace {

const auto kFile = std::make_shared<const std::string>("test/tokenizer.json");

json pattern_of(const std::string& regex, bool literal = false) { return {{literal ? "String" : "Regex", regex}}; }

// The pieces of Split(pattern, behavior, invert) on `text`.
Pieces split(const std::string& regex, const std::string& behavior, bool invert, const std::string& text,
             bool literal = false) {
  const json spec = {{"type", "Split"}, {"pattern", pattern_of(regex, literal)}, {"behavior", behavior}, {"invert", invert}};
  const auto pre = make_pre_tokenizer(JsonNode(spec, "$.pre_tokenizer", kFile));
  std::vector<TextPiece> pieces{{text, true}};
  pre->pre_tokenize(pieces);
  Pieces out;
  for (const TextPiece& p : pieces) out.push_back(p.text);
  return out;
}

// Replace(pattern, content) on `text`.
std::string replace(const std::string& regex, const std::string& content, std::string text, bool literal = false) {
  const json spec = {{"type", "Replace"}, {"pattern", pattern_of(regex, literal)}, {"content", content}};
  make_normalizer(JsonNode(spec, "$.normalizer", kFile))->normalize(text);
  return text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) { return e.what(); }
  return "(no error)";
}

}  // namespace

TEST_CASE("Split cuts at empty matches under every behaviour", "[tokenizer_hf][onig_regex]") {
  // \b matches (0,0) (2,2) (3,3) (5,5) in "ab cd"; the spans between are the text.
  for (const char* behavior : {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"}) {
    INFO(behavior);
    CHECK(split("\\b", behavior, false, "ab cd") == Pieces{"ab", " ", "cd"});
    CHECK(split("(?=[A-Z])", behavior, false, "HelloWorld") == Pieces{"Hello", "World"});
  }
  // Inverted, the empty spans are the kept ones and the text is the removed one.
  CHECK(split("\\b", "Removed", true, "ab cd").empty());
  CHECK(split("\\b", "Isolated", true, "ab cd") == Pieces{"ab", " ", "cd"});
  // x* on "axxb": (0,0) (1,3) (4,4) — the empty match at 3, right after "xx", is skipped.
  CHECK(split("x*", "Removed", false, "axxb") == Pieces{"a", "b"});
  CHECK(split("x*", "Removed", true, "axxb") == Pieces{"xx"});
  CHECK(split("x*", "Isolated", false, "axxb") == Pieces{"a", "xx", "b"});
  CHECK(split("x*", "MergedWithPrevious", false, "axxb") == Pieces{"axx", "b"});
  CHECK(split("x*", "MergedWithPrevious", true, "axxb") == Pieces{"a", "xxb"});
  CHECK(split("x*", "MergedWithNext", false, "axxb") == Pieces{"a", "xxb"});
  CHECK(split("x*", "MergedWithNext", true, "axxb") == Pieces{"axx", "b"});
  CHECK(split("x*", "Contiguous", true, "axxb") == Pieces{"a", "xx", "b"});
}

TEST_CASE("matches are iterated as the onig crate does", "[tokenizer_hf][onig_regex]") {
  // After the empty match at 0 the next search, from 0, finds it again and moves on: "a" never matches.
  CHECK(replace("\\b|a", "-", "a") == "-a-");
  CHECK(replace("x*", "_", "axxb") == "_a_b_");
  // An empty String pattern is an escaped empty regex: it matches between every character.
  CHECK(replace("", "-", "abc", true) == "-a-b-c-");
  CHECK(split("", "Isolated", false, "abc", true) == Pieces{"a", "b", "c"});
  CHECK(replace("\\b", "-", "") == "");  // an empty text has no matches
}

TEST_CASE("Oniguruma escapes and anchors that PCRE2 reads otherwise", "[tokenizer_hf][onig_regex]") {
  CHECK(split("\\h+", "Isolated", false, "DEADbeef xyz") == Pieces{"DEADbeef", " xyz"});  // hex digits
  CHECK(replace("\\H", "_", "0aG ") == "0a__");
  CHECK(replace("[\\h]", "_", "fg") == "_g");
  CHECK(replace("\\v", "|", "\x0B\n") == "|\n");                   // VT only, not vertical space
  CHECK(replace("^", ">", "a\nb\n") == ">a\n>b\n");                // every line; not after the last "\n"
  CHECK(replace("$", "<", "a\nb\n") == "a<\nb<\n<");
  CHECK(replace("\\Z", "<", "a\nb\n") == "a\nb<\n<");
  CHECK(replace(".", "_", "a\r\nb") == "__\n_");                   // only "\n" ends a line
  CHECK(replace("(?m).", "_", "a\nb") == "___");                   // (?m) is dot-all
  CHECK(replace("\\O", "_", "\n") == "_");
  CHECK(replace("\\s", "_", "a\xC2\x85" "b\xC2\xA0" "c") == "a_b_c");  // U+0085 and U+00A0 are spaces
  CHECK(replace("\\d", "_", "1\xD9\xA3\xC2\xBD") == "__\xC2\xBD");     // Nd: ٣ yes, ½ no
  CHECK(replace("\\xc3\\xa9|\\u00E8|\\x{EA}|\\o{353}", "_", "\xC3\xA9\xC3\xA8\xC3\xAA\xC3\xAB") == "____");
  CHECK(replace("\\141\\cA\\q", "_", "a\x01q") == "_");            // octal, control, unknown letter
}

TEST_CASE("Oniguruma's word set, POSIX brackets, classes and scripts", "[tokenizer_hf][onig_regex]") {
  // Outside a class \w reads the Latin-1 table (½ is a word character), inside it the Unicode one.
  CHECK(replace("\\w", "_", "a\xC2\xBD") == "__");
  CHECK(replace("[\\w]", "_", "a\xC2\xBD") == "_\xC2\xBD");
  CHECK(split("\\b", "Isolated", false, "\xC3\xA9\xC2\xBDx 3") == Pieces{"\xC3\xA9\xC2\xBDx", " ", "3"});
  CHECK(replace("[[:punct:]]", "_", "$!") == "__");                // PosixPunct: P and S
  CHECK(replace("\\p{Punct}", "_", "$!") == "$_");                 // the property: P only
  CHECK(split("[a-z&&[^aeiou]]+", "Isolated", false, "hello") == Pieces{"h", "e", "ll", "o"});
  CHECK(replace("[a[bc]]+", "_", "abcd") == "_d");
  CHECK(replace("[[:^alpha:]]+", "_", "\xC3\xA9" "1x_") == "\xC3\xA9_x_");
  CHECK(replace("\\p{Greek}", "_", "\xCD\x82\xCE\xB1") == "\xCD\x82_");  // Script, not Script_Extensions
  CHECK(replace("(?W)\\w+", "_", "\xC3\xA9" "a") == "\xC3\xA9_");
}

TEST_CASE("Oniguruma's options and quantifiers", "[tokenizer_hf][onig_regex]") {
  CHECK(replace("a(?i)b|c", "_", "aBcC") == "_cC");  // a(?i:b|c): the option takes the alternatives
  CHECK(replace("(?i:'s|'t)", "_", "'S 'T") == "_ _");
  CHECK(replace("x{2}?", "_", "xxxxx") == "__x_");   // (?:x{2})?, not a lazy {2}
  CHECK(replace("x{1,2}+", "_", "xxxxx") == "_");    // (?:x{1,2})+, not possessive
  CHECK(replace("x{3,2}x", "_", "xxxx") == "_");     // {3,2} is a possessive {2,3}
  CHECK(replace("x{,2}", "_", "xxx") == "__");       // {0,2}
  CHECK(replace("(?x) a b # c", "_", "ab") == "_");
  CHECK(replace("x{a}", "_", "x{a}") == "_");        // not an interval: literal braces
}

TEST_CASE("Oniguruma constructs Strata does not translate are refused by name", "[tokenizer_hf][onig_regex]") {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"(a)\\1", "backreferences"},
      {"(?~abc)", "absent groups"},
      {"\\y", "text segment boundaries"},
      {"(?y{g})\\X", "text segment options"},
      {"(?P)[[:alpha:]]", "(?P)"},
      {"(?I)k", "whole-pattern option (?I)"},
      {"(?s).", "unknown group option 's'"},
      {"\\p{In_Basic_Latin}", "Unicode block"},
      {"(?i)ss", "multi-character case folding"},
      {"(?i)[\xC3\x9F]", "multi-character"},
      {"(?i)[\\p{Lu}]", "Oniguruma folds the class"},
      {"(?(1)a|b)", "conditionals"},
      {"(*FAIL)", "callouts"},
      {"\\x{41 42}", "\\x{...}"},
      {"\\M-a", "meta escapes"},
      {"x{70000}", "repeat count"},
      {"(?<=a+)b", "PCRE2 does not compile"},
  };
  for (const auto& [regex, reason] : refused) {
    INFO(regex);
    const std::string e = error_of([&] { split(regex, "Isolated", false, "x"); });
    CHECK_THAT(e, Contains("test/tokenizer.json: at $.pre_tokenizer.pattern.Regex"));
    CHECK_THAT(e, Contains(reason));
  }
  // Llama-3's case-insensitive contractions fold no character into several: accepted.
  CHECK(replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)", "_", "I'M WE'LL") == "I_ WE_");
}

TEST_CASE("a regex that exceeds PCRE2's match limit names the file, path and text", "[tokenizer_hf][onig_regex]") {
  const std::string e = error_of([] { split("(x+x+)+[^x]", "Isolated", false, std::string(40, 'x')); });
  CHECK_THAT(e, Contains("test/tokenizer.json: at $.pre_tokenizer.pattern: the regex \"(x+x+)+[^x]\" failed"));
  CHECK_THAT(e, Contains("a text of 40 bytes starting \"xxxxxxxx"));
  CHECK_THAT(e, Contains("match limit"));
}

TEST_CASE("the translation writes Oniguruma's sets", "[tokenizer_hf][onig_regex]") {
  CHECK(onig_to_pcre2("\\h").pcre2 == "[0-9A-Fa-f]");
  CHECK(onig_to_pcre2("\\v").pcre2 == "\\x{B}");
  CHECK(onig_to_pcre2("^a$").pcre2 == "(?m:^)a(?m:$)");
  CHECK(onig_to_pcre2("(?m).").pcre2 == "(?:(?s:.))");
  CHECK(onig_to_pcre2("x{2}?").pcre2 == "(?:x{2})?");
  CHECK_THAT(onig_to_pcre2("(?~a)").error, Contains("at byte 2"));
}
