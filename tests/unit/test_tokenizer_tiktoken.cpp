// Megatron's TikTokenizer (data/tokenizer_tiktoken.h) on a hand-written vocabulary: ids worked out
// by hand from tiktoken's rules (a piece in the vocabulary is one id; otherwise the adjacent pair
// whose joined bytes have the lowest rank merges first, the leftmost of equal ones), the v1 and v2
// splits, special tokens in text and their ids, the vocabulary cut to vocab_size, decode; the
// vocabulary file's errors; Megatron's flags; preprocess and train through the CLI.
// Token-for-token agreement with the tiktoken package itself is test_tokenizer_reference.cpp's
// [tiktoken_reference].
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "data/tokenizer_tiktoken.h"
#include "cli_test_helpers.h"
#include "strata_source_dir.h"
#include "tokenizer_test_files.h"
#include "training/config/config.h"

using namespace strata;
using namespace strata::data;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string vocab_json(const std::vector<std::string>& extra) { return test::tiktoken_vocab_json(extra); }

// ranks 256.. : "ab" "bc" "cbc" "abc" "aa" "xyz" "oW" "12" "\r\n"
const std::vector<std::string> kExtra = {"ab", "bc", "cbc", "abc", "aa", "xyz", "oW", "12", "\r\n"};
constexpr int64_t kSpecial = 8;  // the seven special tokens and <SPECIAL_7>

TikTokenizer::Options options(TiktokenPattern pattern, int64_t vocab_size = kSpecial + 256 + 9) {
  TikTokenizer::Options o;
  o.pattern = pattern;
  o.num_special_tokens = kSpecial;
  o.vocab_size = vocab_size;
  return o;
}

int64_t byte(char c) { return kSpecial + static_cast<unsigned char>(c); }
int64_t extra(size_t k) { return kSpecial + 256 + static_cast<int64_t>(k); }  // kExtra[k]

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) { return e.what(); }
  return "(no error)";
}

}  // namespace

TEST_CASE("tiktoken: hand-computed ids of Megatron's TikTokenizer", "[tokenizer][tiktoken]") {
  const auto t = TikTokenizer::from_string(vocab_json(kExtra), options(TiktokenPattern::v2));
  using V = std::vector<int64_t>;
  CHECK(t->vocab_size() == kSpecial + 256 + 9);
  CHECK(t->eod() == 2);  // </s>
  CHECK(t->bos() == 1);  // <s>
  CHECK(t->pad() == 4);  // <pad>
  // A piece in the vocabulary is one id, even where no merge path leads to it ("xy", "yz" are not tokens).
  CHECK(t->encode("abc") == V{extra(3)});
  CHECK(t->encode("xyz") == V{extra(5)});
  CHECK(t->encode("xyzx") == (V{byte('x'), byte('y'), byte('z'), byte('x')}));
  // "abcbc": ab(256) first → [ab][c][b][c]; then bc(257) at the right → [ab][c][bc]; then the pair
  // [c][bc] joins to "cbc" (258), below "abc" (259) → [ab][cbc].
  CHECK(t->encode("abcbc") == (V{extra(0), extra(2)}));
  // Equal ranks: the leftmost pair merges first: "aaa" → [aa][a], not [a][aa].
  CHECK(t->encode("aaa") == (V{extra(4), byte('a')}));
  CHECK(t->encode("aaaa") == (V{extra(4), extra(4)}));
  // v2 splits "HelloWorld" before W, so "oW" never forms; v1 keeps the letters together.
  CHECK(t->encode("HelloWorld") ==
        (V{byte('H'), byte('e'), byte('l'), byte('l'), byte('o'), byte('W'), byte('o'), byte('r'), byte('l'), byte('d')}));
  const auto v1 = TikTokenizer::from_string(vocab_json(kExtra), options(TiktokenPattern::v1));
  CHECK(v1->encode("HelloWorld") ==
        (V{byte('H'), byte('e'), byte('l'), byte('l'), extra(6), byte('o'), byte('r'), byte('l'), byte('d')}));
  // Digits are pieces of one (\p{N}), so "12" never forms; " \r\n" is one piece, \r\n merges.
  CHECK(t->encode("123") == (V{byte('1'), byte('2'), byte('3')}));
  CHECK(t->encode(" \r\n") == (V{byte(' '), extra(8)}));
  // Special tokens inside text are their ids (Megatron-Core's allowed_special="all"), fillers too.
  CHECK(t->encode("ab</s>ab") == (V{extra(0), 2, extra(0)}));
  CHECK(t->encode("<s><SPECIAL_7><pad>") == (V{1, 7, 4}));
  CHECK(t->encode("<SPECIAL_8>").size() == 11);  // not a special token here: its bytes
  // Decoding: the bytes joined, specials as their text, a split character as U+FFFD.
  CHECK(t->decode({extra(0), 2, byte('c')}) == "ab</s>c");
  CHECK(t->decode({kSpecial + 0xC3}) == "\xEF\xBF\xBD");
  CHECK(t->decode({kSpecial + 0xC3, kSpecial + 0xA9}) == "\xC3\xA9");
  CHECK_THROWS_WITH(t->decode({t->vocab_size()}), Contains("outside [0, 273)"));
  // Invalid UTF-8 is repaired before encoding: one U+FFFD (3 bytes) for the lone 0xFF.
  CHECK(t->encode("a\xFF") == (V{byte('a'), kSpecial + 0xEF, kSpecial + 0xBF, kSpecial + 0xBD}));
  // vocab_size cuts the file: without "abc" and after, "abc" is [ab][c].
  const auto cut = TikTokenizer::from_string(vocab_json(kExtra), options(TiktokenPattern::v2, kSpecial + 256 + 2));
  CHECK(cut->vocab_size() == kSpecial + 258);
  CHECK(cut->encode("abc") == (V{extra(0), byte('c')}));
  // A custom list in another order moves the ids.
  TikTokenizer::Options o = options(TiktokenPattern::v2);
  o.special_tokens = {"<pad>", "</s>", "<s>", "<unk>", "<mask>", "<cls>", "<sep>", "<|im_end|>"};
  const auto custom = TikTokenizer::from_string(vocab_json(kExtra), o);
  CHECK(custom->eod() == 1);
  CHECK(custom->bos() == 2);
  CHECK(custom->encode("x<|im_end|>") == (V{byte('x'), 7}));
}

TEST_CASE("tiktoken: vocabulary file and special token errors name the file, the entry or the field",
          "[tokenizer][tiktoken]") {
  const TikTokenizer::Options o = options(TiktokenPattern::v2);
  auto load_error = [&](const std::string& json, const TikTokenizer::Options& opt) {
    return error_of([&] { TikTokenizer::from_string(json, opt, "v.json"); });
  };
  std::string good = vocab_json(kExtra);
  CHECK_THAT(load_error(good.substr(0, 500), o), Contains("v.json: not valid JSON"));
  CHECK_THAT(load_error("{}", o), Contains("v.json: at $: expected a list"));
  CHECK_THAT(load_error(vocab_json({"ab", "bc", "xx", "yy"}), o), Contains("v.json: at $: 260 entries") &&
                                                                  Contains("needs 265"));
  std::vector<std::string> dup = kExtra;
  dup[3] = "ab";
  CHECK_THAT(load_error(vocab_json(dup), o),
             Contains("v.json: at $[259].token_bytes: the same bytes as entry 256"));
  std::string renumbered = good;
  renumbered.replace(renumbered.find("{\"rank\": 257"), 12, "{\"rank\": 258");
  CHECK_THAT(load_error(renumbered, o), Contains("v.json: at $[257].rank: the rank must be the entry's index, 257"));
  std::string not_byte = good;
  not_byte.replace(not_byte.find("\"token_bytes\": \"QQ==\""), 21, "\"token_bytes\": \"Qg==\"");  // entry 65: "B"
  CHECK_THAT(load_error(not_byte, o), Contains("v.json: at $[65].token_bytes: entries 0 to 255 are the single bytes"));
  std::string not_b64 = good;
  not_b64.replace(not_b64.find("\"token_bytes\": \"YWI=\""), 21, "\"token_bytes\": \"Y!I=\"");  // entry 256
  CHECK_THAT(load_error(not_b64, o), Contains("v.json: at $[256].token_bytes: not base64"));
  std::string extra_key = good;
  extra_key.replace(extra_key.find("{\"rank\": 3,"), 11, "{\"id\": 3, \"rank\": 3,");
  CHECK_THAT(load_error(extra_key, o), Contains("v.json: at $[3]: expected an object with exactly"));
  TikTokenizer::Options missing = o;
  missing.special_tokens = {"<unk>", "<s>", "</s>", "<mask>", "<cls>", "<sep>"};
  CHECK_THAT(load_error(good, missing), Contains("data.tokenizer_special_tokens") && Contains("'<pad>' is missing"));
  TikTokenizer::Options twice = o;
  twice.special_tokens = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>", "<s>"};
  CHECK_THAT(load_error(good, twice), Contains("'<s>' is given twice"));
  TikTokenizer::Options few = o;
  few.num_special_tokens = 5;
  CHECK_THAT(load_error(good, few), Contains("data.tiktoken_num_special_tokens") && Contains("fewer than the 7"));
  TikTokenizer::Options big = o;
  big.num_special_tokens = big.vocab_size;
  CHECK_THAT(load_error(good, big), Contains("must be smaller than the vocabulary size 273"));
  TikTokenizer::Options small = o;
  small.vocab_size = kSpecial + 200;
  CHECK_THAT(load_error(good, small), Contains("fewer than the 256 single bytes"));
  CHECK_THAT(error_of([] { TikTokenizer("/nonexistent/v.json", TikTokenizer::Options{}); }),
             Contains("cannot read /nonexistent/v.json"));
}

TEST_CASE("tiktoken: Megatron's flags map onto the data section", "[tokenizer][tiktoken]") {
  StrataConfig cfg = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", {}, "b.yaml");
  StrataConfig::table().apply_command_line(
      {"--tokenizer-type", "TikTokenizer", "--tokenizer-model", "/m/vocab.json", "--tiktoken-pattern", "v1",
       "--tiktoken-num-special-tokens", "20", "--tokenizer-special-tokens", "<unk>", "<s>", "</s>", "<mask>", "<pad>",
       "<cls>", "<sep>", "<|im_end|>"},
      cfg, nullptr);
  CHECK(cfg.data.tokenizer_type == TokenizerType::TikTokenizer);
  CHECK(cfg.data.tokenizer_model == "/m/vocab.json");
  CHECK(cfg.data.tiktoken_pattern == TiktokenPattern::v1);
  CHECK(cfg.data.tiktoken_num_special_tokens == 20);
  CHECK(cfg.data.tokenizer_special_tokens.size() == 8);
  CHECK(cfg.data.tokenizer_special_tokens.back() == "<|im_end|>");
  // The special tokens of the other tokenizers are refused; the tiktoken settings are accepted there
  // (Megatron ignores them) and change nothing.
  const std::string base = "optimizer:\n  lr: 1.0e-3\nmodel:\n  num_layers: 1\ndata:\n  mock_data: true\n";
  StrataConfig other = StrataConfig::from_yaml_text(base + "  tokenizer_special_tokens: ['<s>']\n", {}, "b.yaml");
  CHECK_THAT(error_of([&] { static_cast<void>(other.validate(1)); }),
             Contains("data.tokenizer_special_tokens") && Contains("TikTokenizer only"));
  StrataConfig null_tok = StrataConfig::from_yaml_text(
      base + "  tokenizer_type: NullTokenizer\n  tokenizer_special_tokens: ['<s>']\n", {}, "b.yaml");
  null_tok.model.vocab_size = 64;
  CHECK(null_tok.validate(1).data->tokenizer_special_tokens.empty());  // Megatron's NullTokenizer ignores them
  StrataConfig ignored = StrataConfig::from_yaml_text(base, {}, "b.yaml");
  StrataConfig::table().apply_command_line({"--tiktoken-pattern", "v1", "--tiktoken-num-special-tokens", "5"}, ignored,
                                           nullptr);
  const ResolvedConfig r = ignored.validate(1);  // warned once, then reset: the resolved config shows the defaults
  CHECK(r.data->tiktoken_pattern == TiktokenPattern::v2);
  CHECK(r.data->tiktoken_num_special_tokens == 1000);
  StrataConfig no_model = StrataConfig::from_yaml_text(base + "  tokenizer_type: TikTokenizer\n", {}, "b.yaml");
  CHECK_THAT(error_of([&] { static_cast<void>(no_model.validate(1)); }),
             Contains("data.tokenizer_model") && Contains("required by data.tokenizer_type TikTokenizer"));
}

TEST_CASE("cli: preprocess and train with a TikTokenizer vocabulary, as Megatron's flags name it",
          "[tokenizer][tiktoken][cli_train]") {
  const fs::path dir = strata::test::process_temp_dir("strata_test_tiktoken_cli_");
  const fs::path vocab = dir / "vocab.json";
  write(vocab, vocab_json(kExtra));
  std::string jsonl;
  for (int i = 0; i < 300; ++i) jsonl += R"({"text": "abc abcbc xyz"})" "\n";
  write(dir / "docs.jsonl", jsonl);
  const std::string prefix = (dir / "docs").string();
  const std::vector<std::string> tok = {"--tokenizer-type", "TikTokenizer", "--tokenizer-model", vocab.string(),
                                        "--tiktoken-pattern", "v1", "--tiktoken-num-special-tokens", "8"};
  std::vector<std::string> pre = {"preprocess", "--input", (dir / "docs.jsonl").string(), "--output-prefix", prefix,
                                  "--vocab-size", "273", "--append-eod", "--workers", "2"};
  pre.insert(pre.end(), tok.begin(), tok.end());
  strata::test::CliResult p = strata::test::run_cli(pre);
  INFO(p.err);
  REQUIRE(p.rc == 0);
  // v1 splits "abc abcbc xyz" into "abc", " abcbc", " xyz": [abc], [ ][ab][cbc] (as "abcbc" in the
  // hand-computed case), [ ][x][y][z] (" xyz" is not a token); then </s>: 1 + 3 + 4 + 1 = 9 tokens.
  CHECK_THAT(p.out, Contains("TikTokenizer, 300 documents, 2700 tokens"));
  std::vector<std::string> train = {
      "train", "--config", (fs::path(STRATA_SOURCE_DIR) / "configs/gpt_tiny.yaml").string(), "--vocab-size", "273",
      "--data-path", prefix + "_text_document", "--num-layers", "1", "--hidden-size", "32", "--num-attention-heads",
      "2", "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size",
      "2", "--train-iters", "2", "--eval-iters", "1", "--eval-interval", "2", "--lr-warmup-iters", "0", "--split",
      "90,10,0", "training.device=cpu", "checkpoint.save=null", "checkpoint.save_interval=null",
      "logging.tensorboard_dir=null", "logging.metrics_jsonl=null"};
  train.insert(train.end(), tok.begin(), tok.end());
  strata::test::CliResult t = strata::test::run_cli(train);
  INFO(t.out);
  INFO(t.err);
  REQUIRE(t.rc == 0);
  CHECK_THAT(t.out + t.err, Contains("tokenizer TikTokenizer: vocab size 273 (eod 2)"));
  fs::remove_all(dir);
}
