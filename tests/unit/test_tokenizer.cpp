// Tokenizers (data/tokenizer.h): the GPT-2 bytes_to_unicode table, the GPT-2 pre-tokenizer on tricky
// strings (expected splits worked out from the regex
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), BPE on a hand-written
// vocabulary, exact ids on the committed tiny vocabulary (tests/data/gpt2_tiny, expected ids from
// its make_vocab.py, which runs openai/gpt-2's encoder.py algorithm), round trips on arbitrary UTF-8
// and random bytes, byte-level and null tokenizers, and errors.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/config_table.h"
#include "data/tokenizer.h"
#include "data/tokenizer_preprocess.h"
#include "strata_source_dir.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::data;
using Catch::Matchers::Contains;

namespace {
const std::filesystem::path kRepo = std::filesystem::path(STRATA_SOURCE_DIR);
const std::string kVocab = (kRepo / "tests/data/gpt2_tiny/vocab.json").string();
const std::string kMerges = (kRepo / "tests/data/gpt2_tiny/merges.txt").string();

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> out;
  for (auto p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}
using S = std::vector<std::string>;
}  // namespace

TEST_CASE("tokenizer: GPT-2 bytes_to_unicode table", "[tokenizer]") {
  const auto& enc = gpt2_byte_encoder();
  CHECK(enc['!'] == "!");
  CHECK(enc['A'] == "A");
  CHECK(enc['~'] == "~");
  CHECK(enc[' '] == "\u0120");   // Ġ
  CHECK(enc['\n'] == "\u010A");  // Ċ
  CHECK(enc['\t'] == "\u0109");  // ĉ
  CHECK(enc[0] == "\u0100");     // Ā
  CHECK(enc[0x7F] == "\u0121");  // DEL: the 34th non-printable byte
  CHECK(enc[0xA0] == "\u0142");  // NBSP
  CHECK(enc[0xAD] == "\u0143");  // soft hyphen: the last remapped byte
  CHECK(enc[0xA1] == "\u00A1");  // ¡ maps to itself
  CHECK(enc[0xFF] == "\u00FF");
  for (int b = 0; b < 256; ++b) {
    // Every byte maps to one code point and back.
    const std::string& s = enc[b];
    uint32_t cp = static_cast<unsigned char>(s[0]);
    if (s.size() == 2) cp = ((cp & 0x1F) << 6) | (static_cast<unsigned char>(s[1]) & 0x3F);
    CHECK(gpt2_byte_decode(cp) == b);
  }
  CHECK(gpt2_byte_decode(' ') == -1);
  CHECK(gpt2_byte_decode(0x144) == -1);
}

TEST_CASE("tokenizer: Unicode classes", "[tokenizer]") {
  CHECK(unicode_is_letter('a'));
  CHECK(unicode_is_letter(0xE9));    // é
  CHECK(unicode_is_letter(0x436));   // ж
  CHECK(unicode_is_letter(0x4E2D));  // 中
  CHECK(unicode_is_letter(0x3042));  // あ
  CHECK(!unicode_is_letter('1'));
  CHECK(!unicode_is_letter(0x2014));  // em dash
  CHECK(unicode_is_number('7'));
  CHECK(unicode_is_number(0x0663));  // Arabic-Indic three
  CHECK(unicode_is_number(0xBD));    // ½ (No)
  CHECK(unicode_is_number(0x2167));  // Roman numeral eight (Nl)
  CHECK(!unicode_is_number('x'));
  CHECK(unicode_is_space(' '));
  CHECK(unicode_is_space('\n'));
  CHECK(unicode_is_space(0xA0));
  CHECK(unicode_is_space(0x3000));
  CHECK(!unicode_is_space(0x200B));  // zero-width space is not White_Space
}

TEST_CASE("tokenizer: GPT-2 pre-tokenizer splits", "[tokenizer]") {
  CHECK(split("Hello world") == S{"Hello", " world"});
  CHECK(split("I'm sure it's what they've said we'd do, they'll re're") ==
        S{"I", "'m", " sure", " it", "'s", " what", " they", "'ve", " said", " we", "'d", " do", ",", " they", "'ll",
          " re", "'re"});
  CHECK(split("DON'T") == S{"DON", "'", "T"});  // the contractions are case-sensitive
  CHECK(split(" 'tis") == S{" '", "tis"});
  CHECK(split("x ''s") == S{"x", " ''", "s"});
  CHECK(split("abc123 4567") == S{"abc", "123", " 4567"});
  CHECK(split("3.14, yes!?") == S{"3", ".", "14", ",", " yes", "!?"});
  CHECK(split("a   b") == S{"a", "  ", " b"});
  CHECK(split("a \n b") == S{"a", " \n", " b"});
  CHECK(split("end  ") == S{"end", "  "});
  CHECK(split("end \n") == S{"end", " \n"});
  CHECK(split("one\n\ntwo") == S{"one", "\n", "\n", "two"});
  CHECK(split("\n\n The") == S{"\n\n", " The"});
  CHECK(split("x\t y") == S{"x", "\t", " y"});
  CHECK(split("  ...") == S{" ", " ..."});
  CHECK(split("café naïve Москва 東京") == S{"café", " naïve", " Москва", " 東京"});
  CHECK(split("٣٤ ½") == S{"٣٤", " ½"});
  CHECK(split("a\u00A0b") == S{"a", "\u00A0", "b"});  // NBSP is whitespace but not the optional ' '
  CHECK(split("—dash") == S{"—", "dash"});
  CHECK(split("").empty());
  CHECK(split(" ") == S{" "});
  // Invalid UTF-8 bytes are single "other" characters, and the pieces always cover the input.
  CHECK(split(std::string("a\xFF\xFE b")) == S{"a", "\xFF\xFE", " b"});
}

TEST_CASE("tokenizer: BPE merges by rank on a hand-written vocabulary", "[tokenizer]") {
  // Symbols: the bytes of "hel o" plus merges; ranks: "l l" < "h e" < "he ll" < "Ġ h".
  const std::string vocab = R"({"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "ll": 5, "he": 6, "hell": 7,
                                "Ġh": 8, "<|endoftext|>": 9})";
  const std::string merges = "#version: 0.2\nl l\nh e\nhe ll\nĠ h\n";
  auto tok = GPT2BPETokenizer::from_strings(vocab, merges);
  CHECK(tok->vocab_size() == 10);
  CHECK(tok->eod() == 9);
  // "hello": h e l l o → (l l) h e ll o → (h e) he ll o → (he ll) hell o.
  CHECK(tok->bpe("hello") == S{"hell", "o"});
  CHECK(tok->encode("hello") == std::vector<int64_t>{7, 3});
  // " hello" is one pre-token: Ġ h e l l o → Ġ h e ll o → Ġ he ll o → Ġ hell o ("Ġ h" never applies).
  CHECK(tok->encode(" hello") == std::vector<int64_t>{4, 7, 3});
  CHECK(tok->encode("hello hello") == std::vector<int64_t>{7, 3, 4, 7, 3});
  CHECK(tok->encode(" h") == std::vector<int64_t>{8});
  CHECK(tok->encode("lll") == std::vector<int64_t>{5, 2});  // left to right, non-overlapping
  CHECK(tok->decode({4, 7, 3, 9}) == " hello<|endoftext|>");
  CHECK_THROWS_WITH(tok->encode("x"), Contains("is not in the vocabulary"));
  CHECK_THROWS_WITH(tok->decode({10}), Contains("outside [0, 10)"));
}

TEST_CASE("tokenizer: GPT-2 BPE exact ids on the committed tiny vocabulary", "[tokenizer]") {
  GPT2BPETokenizer tok(kVocab, kMerges);
  CHECK(tok.vocab_size() == 457);
  CHECK(tok.eod() == 456);
  // Expected ids: `python3 tests/data/gpt2_tiny/make_vocab.py --expect` (openai/gpt-2 encoder.py).
  CHECK(tok.encode("The quick brown fox.") == std::vector<int64_t>{282, 220, 329, 438, 272, 81, 78, 86, 77, 347, 13});
  CHECK(tok.encode("We're testing the tokenizer's merges!") ==
        std::vector<int64_t>{376, 360, 281, 331, 277, 258, 358, 361, 290, 320, 0});
  CHECK(tok.encode("In 2024:  365 days\n\nthe end  ") ==
        std::vector<int64_t>{373, 338, 364, 25, 220, 220, 367, 279, 396, 198, 198, 83, 257, 220, 260, 67, 220, 220});
  CHECK(tok.encode("hello world") == std::vector<int64_t>{257, 324, 78, 273, 300, 75, 67});
  CHECK(tok.encode("hello world") == std::vector<int64_t>{257, 324, 78, 273, 300, 75, 67});  // from the cache
  // "<|endoftext|>" in the text is ordinary text (Megatron's GPT2Tokenizer), EOD only by id.
  CHECK(tok.encode("<|endoftext|>") != std::vector<int64_t>{456});
  CHECK(tok.decode({456}) == "<|endoftext|>");
}

TEST_CASE("tokenizer: encode/decode round trips on UTF-8 and random bytes", "[tokenizer]") {
  GPT2BPETokenizer gpt2(kVocab, kMerges);
  ByteLevelTokenizer bytes;
  std::vector<std::string> texts = {
      "",
      "The training loop reads tokens; we're done.\n\n  Next paragraph\t\twith tabs   \n",
      "café naïve Москва 東京 ٣٤ ½ — emoji 🙂 and combining e\u0301",
      "   leading and trailing   ",
      std::string("nul\0byte", 8),
  };
  std::mt19937_64 rng(7);
  for (int t = 0; t < 20; ++t) {
    std::string s(static_cast<size_t>(rng() % 300), '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xFF);
    texts.push_back(s);
  }
  for (const std::string& s : texts) {
    CHECK(gpt2.decode(gpt2.encode(s)) == s);
    CHECK(bytes.decode(bytes.encode(s)) == s);
    std::string joined;
    for (auto p : gpt2_pretokenize(s)) joined += p;
    CHECK(joined == s);
  }
  // BPE shortens ordinary text.
  const std::string text = texts[1];
  CHECK(gpt2.encode(text).size() < text.size());
}

TEST_CASE("tokenizer: byte-level and null tokenizers", "[tokenizer]") {
  ByteLevelTokenizer b;
  CHECK(b.vocab_size() == 257);
  CHECK(b.eod() == 256);
  CHECK(b.encode("A\xC3\xA9") == std::vector<int64_t>{65, 0xC3, 0xA9});
  CHECK(b.decode({72, 105, 256}) == "Hi");  // EOD decodes to nothing
  CHECK_THROWS_WITH(b.decode({257}), Contains("outside [0, 257)"));

  // Megatron-Core's NullTokenizer(vocab_size): the EOD id is the last id of the vocabulary.
  NullTokenizer n(100);
  CHECK(n.vocab_size() == 100);
  CHECK(n.eod() == 99);
  CHECK(n.encode(" 1 2\n 3  99 ") == std::vector<int64_t>{1, 2, 3, 99});
  CHECK(n.decode({1, 2, 3}) == "1 2 3");
  CHECK_THROWS_WITH(n.encode("1 x"), Contains("'x' is not a decimal token id"));
  CHECK_THROWS_WITH(n.encode("100"), Contains("outside [0, 100)"));

  auto config = [](TokenizerType type, std::optional<std::string> vocab = {}, std::optional<std::string> merges = {}) {
    DataConfig d;
    d.tokenizer_type = type;
    d.vocab_file = vocab;
    d.merge_file = merges;
    return d;
  };
  auto t = build_tokenizer(config(TokenizerType::NullTokenizer), 50);
  CHECK(t->name() == "NullTokenizer");
  CHECK(t->vocab_size() == 50);
  CHECK(t->eod() == 49);
  CHECK(build_tokenizer(config(TokenizerType::GPT2BPETokenizer, kVocab, kMerges))->vocab_size() == 457);
  CHECK_THROWS_WITH(build_tokenizer(config(TokenizerType::NullTokenizer)), Contains("NullTokenizer needs a vocab size"));
  CHECK_THROWS_WITH(build_tokenizer(config(TokenizerType::GPT2BPETokenizer, kVocab)),
                    Contains("GPT2BPETokenizer needs a merge file"));
  CHECK_THROWS_WITH(build_tokenizer(config(TokenizerType::HuggingFaceTokenizer)),
                    Contains("HuggingFaceTokenizer needs a tokenizer model (data.tokenizer_model, --tokenizer-model)"));
}

TEST_CASE("tokenizer: bad vocabulary and merge files are rejected", "[tokenizer]") {
  CHECK_THROWS_WITH(GPT2BPETokenizer("/nonexistent/vocab.json", kMerges), Contains("cannot open vocab file"));
  CHECK_THROWS_WITH(GPT2BPETokenizer::from_strings("{not json", ""), Contains("is not valid JSON"));
  CHECK_THROWS_WITH(GPT2BPETokenizer::from_strings(R"({"a": 0})", ""), Contains("no \"<|endoftext|>\""));
  CHECK_THROWS_WITH(GPT2BPETokenizer::from_strings(R"({"a": 0, "<|endoftext|>": 5})", ""),
                    Contains("distinct ids 0..1"));
  CHECK_THROWS_WITH(GPT2BPETokenizer::from_strings(R"({"a": 0, "<|endoftext|>": 1})", "#version: 0.2\na b c\n"),
                    Contains("line 2: expected \"a b\""));
}

TEST_CASE("tokenizer: preprocess documents from plain text and JSONL", "[tokenizer]") {
  CHECK(split_text_documents("a\nb\n\n\n  \nc\r\nd\n", true) == S{"a\nb", "c\nd"});
  CHECK(split_text_documents("a\nb\n\nc", false) == S{"a\nb\n\nc"});
  CHECK(split_text_documents(" \n\t", false).empty());
  CHECK(read_jsonl_field("{\"text\": \"x y\", \"id\": 1}\n\n{\"text\": \"\\u00e9\"}\n", "text", "f.jsonl") ==
        S{"x y", "\u00e9"});
  CHECK_THROWS_WITH(read_jsonl_field("{\"text\": 1}\n", "text", "f.jsonl"), Contains("f.jsonl line 1 key \"text\" is not a string"));
  CHECK_THROWS_WITH(read_jsonl_field("{}\n{\n", "text", "f.jsonl"), Contains("line 1 has no key"));
  CHECK_THROWS_WITH(read_jsonl_field("[1]\n", "text", "f.jsonl"), Contains("line 1 is not a JSON object"));
  CHECK(preprocess_output_prefix("out/corpus/licenses", "text") == "out/corpus/licenses_text_document");
  CHECK(is_jsonl_input("a.jsonl"));
  CHECK(!is_jsonl_input("a.txt"));

  const auto dir = std::filesystem::temp_directory_path() / "strata_test_tokenizer_preprocess";
  std::filesystem::create_directories(dir);
  const std::string txt = (dir / "a.txt").string(), jsonl = (dir / "b.jsonl").string();
  std::ofstream(txt) << "one two\n\nthree\n";
  std::ofstream(jsonl) << "{\"text\": \"four\", \"title\": \"T\"}\n{\"text\": \"five six\", \"title\": \"U\"}\n";
  PreprocessOptions o;
  o.inputs = {txt, jsonl};
  o.split_paragraphs = true;
  o.append_eod = true;
  for (int workers : {1, 3}) {
    o.workers = workers;
    std::vector<std::vector<int64_t>> docs;
    PreprocessStats st = tokenize_documents(
        o, [] { return std::make_unique<ByteLevelTokenizer>(); },
        [&](size_t k, const std::vector<int64_t>& t) {
          CHECK(k == 0);
          docs.push_back(t);
        });
    CHECK(st.documents == 4);
    CHECK(st.tokens == 8 + 6 + 5 + 9);
    REQUIRE(docs.size() == 4);
    CHECK(docs[0] == std::vector<int64_t>{'o', 'n', 'e', ' ', 't', 'w', 'o', 256});
    CHECK(docs[3] == std::vector<int64_t>{'f', 'i', 'v', 'e', ' ', 's', 'i', 'x', 256});
  }
  // Progress: batches of one document, reported after each (interval 0); the documents and their
  // order do not depend on the batch size.
  o.workers = 2;
  o.batch_documents = 1;
  o.progress_interval_seconds = 0.0;
  std::vector<PreprocessProgress> seen;
  o.on_progress = [&](const PreprocessProgress& p) { seen.push_back(p); };
  std::vector<std::vector<int64_t>> one_by_one;
  tokenize_documents(o, [] { return std::make_unique<ByteLevelTokenizer>(); },
                     [&](size_t, const std::vector<int64_t>& t) { one_by_one.push_back(t); });
  CHECK(one_by_one.size() == 4);
  CHECK(one_by_one[3] == std::vector<int64_t>{'f', 'i', 'v', 'e', ' ', 's', 'i', 'x', 256});
  REQUIRE(seen.size() == 4);
  const int64_t total = static_cast<int64_t>(std::filesystem::file_size(txt) + std::filesystem::file_size(jsonl));
  const int64_t doc_bytes[] = {7, 5, 4, 8};  // "one two", "three", "four", "five six"
  int64_t bytes = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    bytes += doc_bytes[i];
    CHECK(seen[i].documents == static_cast<int64_t>(i) + 1);
    CHECK(seen[i].bytes == bytes);
    CHECK(seen[i].total_bytes == total);
  }
  o.on_progress = nullptr;
  PreprocessProgress p;
  p.bytes = 25, p.total_bytes = 100, p.seconds = 2.0;
  CHECK(p.seconds_left() == Approx(6.0));  // 75 bytes more at 12.5 bytes/s
  CHECK(p.mb_per_second() == Approx(12.5e-6));
  p.bytes = 100;
  CHECK(p.seconds_left() == 0.0);
  // Two JSONL keys: two document streams.
  o.inputs = {jsonl};
  o.json_keys = {"text", "title"};
  std::vector<size_t> keys;
  tokenize_documents(o, [] { return std::make_unique<ByteLevelTokenizer>(); },
                     [&](size_t k, const std::vector<int64_t>&) { keys.push_back(k); });
  CHECK(keys == std::vector<size_t>{0, 0, 1, 1});
  o.inputs = {txt};
  CHECK_THROWS_WITH(tokenize_documents(o, [] { return std::make_unique<ByteLevelTokenizer>(); },
                                       [](size_t, const std::vector<int64_t>&) {}),
                    Contains("give a single --json-keys"));
  std::filesystem::remove_all(dir);
}

// GPT2BPETokenizer's reference is make_vocab.py (openai/gpt-2's algorithm) above. The reference
// packages (`tokenizers`, `sentencepiece`, `tiktoken`) are compared token for token with the other
// tokenizers in test_tokenizer_reference.cpp.
