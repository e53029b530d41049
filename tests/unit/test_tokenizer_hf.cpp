// HuggingFaceTokenizer and SentencePieceTokenizer on hand-built files: BPE merges, byte fallback,
// unknown-token fusing, templates, added-token stripping, decoders, the UTF-8 repair and streaming,
// and bad input (malformed, truncated or unsupported files; a vocabulary the model cannot hold),
// each error naming the file and the JSON path. The token-for-token comparison with the reference
// packages is test_tokenizer_reference.cpp.
// Reference: hand-computed from the semantics of huggingface/tokenizers (models/bpe, decoders,
// added_vocabulary.rs) and the Unicode Standard §3.9 (U+FFFD substitution).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config_table.h"
#include "data/tokenizer.h"
#include "data/tokenizer_hf.h"
#include "data/tokenizer_sentencepiece.h"
#include "data/utf8.h"
#include "training/config/config.h"
#include "cli_test_helpers.h"
#include "strata_source_dir.h"
#include "tokenizer_test_files.h"

using namespace strata;
using namespace strata::data;
using Catch::Matchers::Contains;
using json = nlohmann::json;
using strata::test::kSpecials;
using strata::test::sp_style_tokenizer;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<HuggingFaceTokenizer> from_json(const json& j, const char* specials = kSpecials) {
  return HuggingFaceTokenizer::from_strings(j.dump(), specials, "test/tokenizer.json");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) { return e.what(); }
  return "(no error)";
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("strata_tokenizer_hf_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

}  // namespace

TEST_CASE("tokenizer.json: merges, byte fallback, fused unknowns and the template", "[tokenizer_hf]") {
  const auto tok = from_json(sp_style_tokenizer());
  CHECK(tok->vocab_size() == 12);
  CHECK(tok->eod() == 2);
  CHECK(tok->bos() == 1);
  // "ab ab": ▁ prepended, spaces → ▁: "▁ab▁ab"; a+b → ab (rank 0), ▁+ab → ▁ab (rank 1).
  CHECK(tok->encode("ab ab") == std::vector<int64_t>{1, 7, 7, 2});
  // é = C3 A9 falls back to its bytes; "zz" is two unknown characters fused into one <unk>.
  CHECK(tok->encode("\xC3\xA9zzx") == std::vector<int64_t>{1, 3, 8, 9, 0, 10, 2});
  // [SEP] is matched on the raw text and takes the spaces around it (lstrip, rstrip).
  CHECK(tok->encode("ab [SEP]  ab") == std::vector<int64_t>{1, 7, 11, 7, 2});
  // Decoding: ▁ → " ", bytes → é, fused, then one leading and one trailing space stripped.
  CHECK(tok->decode({7, 8, 9, 3}) == "ab\xC3\xA9");
  CHECK(tok->decode({1, 7, 2}) == "<s> ab</s>");
  // A lone continuation byte is one U+FFFD per byte, as ByteFallback decodes it.
  CHECK(tok->decode({7, 9}) == "ab\xEF\xBF\xBD");
  CHECK_THROWS_WITH(tok->decode({12}), Contains("id 12 is outside [0, 12)"));

  const auto plain = HuggingFaceTokenizer::from_strings(sp_style_tokenizer().dump(), kSpecials, "t.json", false);
  CHECK(plain->encode("ab ab") == std::vector<int64_t>{7, 7});  // --tokenizer-hf-no-include-special-tokens
  CHECK(plain->decode({1, 7, 2}) == "ab");                       // special tokens left out
}

TEST_CASE("UTF-8 repair replaces each maximal ill-formed subpart by one U+FFFD", "[tokenizer_hf]") {
  const std::string r(kReplacementCharacter);
  CHECK(utf8_replace_invalid("ok \xE2\x82\xAC") == "ok \xE2\x82\xAC");
  CHECK(utf8_replace_invalid("\xE2\x82") == r);                  // truncated 3-byte sequence: one
  CHECK(utf8_replace_invalid("\xC0\xAF") == r + r);              // C0 never starts a sequence: two
  CHECK(utf8_replace_invalid("\xED\xA0\x80") == r + r + r);      // a surrogate: ED then A0 is ill-formed
  CHECK(utf8_replace_invalid("\xF0\x9F\x98" "A") == r + "A");    // truncated 4-byte sequence before 'A'
  CHECK(utf8_replace_invalid("\xF4\x90\x80\x80") == r + r + r + r);  // beyond U+10FFFF
  CHECK(is_valid_utf8(utf8_replace_invalid("\xFF\xFE\x80 \xE2\x28\xA1")));
}

TEST_CASE("streamed decoding holds back a character split across byte tokens", "[tokenizer_hf]") {
  const auto tok = from_json(sp_style_tokenizer());
  StreamingDetokenizer stream(*tok);
  CHECK(stream.push(7) == "ab");
  CHECK(stream.push(8).empty());                 // C3: half of é
  CHECK(stream.push(9) == "\xC3\xA9");           // A9 completes it
  CHECK(stream.push(3).empty());                 // a trailing ▁ decodes to nothing yet (stripped)
  CHECK(stream.push(10) == " x");
  CHECK(stream.finish().empty());
}

TEST_CASE("tokenizer.json errors name the file and the JSON path", "[tokenizer_hf]") {
  json j = sp_style_tokenizer();
  CHECK_THAT(error_of([] { HuggingFaceTokenizer::from_strings("{\"model\": {", "{}", "t/tokenizer.json"); }),
             Contains("t/tokenizer.json: not valid JSON (truncated or malformed)"));
  json wordpiece = j;
  wordpiece["model"]["type"] = "WordPiece";
  CHECK_THAT(error_of([&] { from_json(wordpiece); }),
             Contains("test/tokenizer.json: at $.model.type: model \"WordPiece\" is not implemented"));
  json lowercase = j;
  lowercase["normalizer"]["normalizers"][1] = {{"type", "Lowercase"}};
  CHECK_THAT(error_of([&] { from_json(lowercase); }),
             Contains("at $.normalizer.normalizers[1]: normalizer \"Lowercase\" is not implemented"));
  json whitespace = j;
  whitespace["pre_tokenizer"] = {{"type", "Whitespace"}};
  CHECK_THAT(error_of([&] { from_json(whitespace); }), Contains("at $.pre_tokenizer: pre-tokenizer \"Whitespace\""));
  json ctc = j;
  ctc["decoder"]["decoders"][2] = {{"type", "CTC"}};
  CHECK_THAT(error_of([&] { from_json(ctc); }), Contains("at $.decoder.decoders[2]: decoder \"CTC\" is not implemented"));
  json bad_merge = j;
  bad_merge["model"]["merges"][0] = "a q";
  CHECK_THAT(error_of([&] { from_json(bad_merge); }),
             Contains("at $.model.merges[0]: a merge of a token that is not in the vocabulary"));
  // Found by fuzz_hf_tokenizer: two tokens with one id (decoding it named no token); refused by name.
  json shared_id = j;
  shared_id["model"]["vocab"]["zz"] = shared_id["model"]["vocab"]["a"];
  CHECK_THAT(error_of([&] { from_json(shared_id); }),
             Contains("test/tokenizer.json: at $.model.vocab: the tokens") && Contains(" share id "));
  // Found by fuzz_hf_tokenizer: a template token id beyond the vocabulary was emitted by encode.
  json far_template = j;
  far_template["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {600}}, {"tokens", {"<s>"}}}}}}};
  CHECK_THAT(error_of([&] { from_json(far_template); }),
             Contains("at $.post_processor.special_tokens.<s>.ids[0]: template token id 600 is outside the vocabulary"));
  // Found by fuzz_hf_tokenizer (a timeout): one id near 2^31 made the dense id tables gigabytes.
  json far_id = j;
  far_id["model"]["vocab"]["zz"] = (int64_t{1} << 31) - 1;
  CHECK_THAT(error_of([&] { from_json(far_id); }),
             Contains("at $.model.vocab: token ids reach 2147483647 but only") && Contains("tokens are named"));
  json bert = j;
  bert["post_processor"] = {{"type", "BertProcessing"}};
  CHECK_THAT(error_of([&] { from_json(bert); }), Contains("at $.post_processor.type: post-processor \"BertProcessing\""));
  json truncating = j;
  truncating["truncation"] = {{"max_length", 512}};
  CHECK_THAT(error_of([&] { from_json(truncating); }), Contains("at $.truncation: truncation is set"));
  json bad_regex = j;
  bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  CHECK_THAT(error_of([&] { from_json(bad_regex); }),
             Contains("at $.pre_tokenizer.pattern.Regex: the regex \"(unclosed\" cannot be used: a '(' without ')'"));
  CHECK_THAT(error_of([&] { from_json(j, "{}"); }), Contains("no eos_token"));
  CHECK_THAT(error_of([&] { from_json(j, R"({"eos_token": "<eos>"})"); }),
             Contains("at $.eos_token: \"<eos>\" is neither an added token nor in the vocabulary"));
}

TEST_CASE("tokenizer files: missing, truncated and too large for the model are rejected before training",
          "[tokenizer_hf]") {
  const fs::path dir = temp_dir("files");
  CHECK_THAT(error_of([&] { HuggingFaceTokenizer t(dir.string()); }),
             Contains((dir / "tokenizer.json").string() + " is missing"));
  const std::string full = sp_style_tokenizer().dump();
  write(dir / "tokenizer.json", full.substr(0, full.size() / 2));
  write(dir / "tokenizer_config.json", kSpecials);
  CHECK_THAT(error_of([&] { HuggingFaceTokenizer t(dir.string()); }),
             Contains((dir / "tokenizer.json").string() + ": not valid JSON (truncated or malformed)"));
  write(dir / "tokenizer.json", full);
  HuggingFaceTokenizer whole(dir.string());
  CHECK(whole.encode("ab") == std::vector<int64_t>{1, 7, 2});
  CHECK(HuggingFaceTokenizer::files_of(dir.string()).size() == 2);

  // The model's vocabulary must hold the tokenizer's ids.
  StrataConfig cfg = StrataConfig::from_yaml_text(
      "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n  tokenizer_type: HuggingFaceTokenizer\n  tokenizer_model: " +
          dir.string() + "\nmodel:\n  num_layers: 1\n  vocab_size: 8\n",
      {}, "t.yaml");
  CHECK_THAT(error_of([&] { build_checked_tokenizer(cfg.data, cfg.model.vocab_size); }),
             Contains("model.vocab_size") && Contains("HuggingFaceTokenizer: 12 ids"));

  // SentencePiece: a file that is not a model, named in the error.
  write(dir / "tokenizer.model", "not a protobuf");
  CHECK_THAT(error_of([&] { SentencePieceTokenizer t((dir / "tokenizer.model").string(), "Llama2Tokenizer"); }),
             Contains("Llama2Tokenizer: " + (dir / "tokenizer.model").string() + " is not a SentencePiece model"));
  // Found by fuzz_sentencepiece: a piece (field 1) claiming 22 MB in a 9-byte file made the library's
  // protobuf reserve 22 MB before failing; the framing is checked first.
  write(dir / "tokenizer.model", std::string("\x0a\xec\x9a\xc0\x0a\x0a\x01\x61\x15", 9));
  CHECK_THAT(error_of([&] { SentencePieceTokenizer t((dir / "tokenizer.model").string(), "Llama2Tokenizer"); }),
             Contains("is not a SentencePiece model") && Contains("field 1 at byte 0 claims more bytes than the file has"));
  fs::remove_all(dir);
}

TEST_CASE("tokenizer config: Megatron's flags map and a missing model file is named", "[tokenizer_hf]") {
  StrataConfig cfg = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", {}, "b.yaml");
  StrataConfig::table().apply_command_line(
      {"--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "/models/llama3",
       "--tokenizer-hf-no-include-special-tokens"},
      cfg, nullptr);
  CHECK(cfg.data.tokenizer_type == TokenizerType::HuggingFaceTokenizer);
  CHECK(cfg.data.tokenizer_model == "/models/llama3");
  CHECK(cfg.data.tokenizer_hf_no_include_special_tokens);
  StrataConfig no_model = StrataConfig::from_yaml_text(
      "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n  tokenizer_type: Llama2Tokenizer\nmodel:\n  num_layers: 1\n",
      {}, "b.yaml");
  CHECK_THAT(error_of([&] { static_cast<void>(no_model.validate(1)); }),
             Contains("data.tokenizer_model") && Contains("required by data.tokenizer_type Llama2Tokenizer"));
  CHECK_THAT(error_of([&] {
               StrataConfig c = cfg;
               StrataConfig::table().apply_command_line({"--tokenizer-sentencepiece-legacy"}, c, nullptr);
             }),
             Contains("--tokenizer-sentencepiece-legacy: not supported by Strata"));
}

TEST_CASE("cli: preprocess and train with a tokenizer.json, as Megatron's flags name it", "[tokenizer_hf][cli_train]") {
  const fs::path dir = strata::test::process_temp_dir("strata_test_tokenizer_hf_cli_");
  const fs::path tok = dir / "tokenizer";
  fs::create_directories(tok);
  write(tok / "tokenizer.json", sp_style_tokenizer().dump());
  write(tok / "tokenizer_config.json", kSpecials);
  std::string jsonl;
  for (int i = 0; i < 300; ++i) jsonl += R"({"text": "ab ab ab x"})" "\n";
  write(dir / "docs.jsonl", jsonl);
  const std::string prefix = (dir / "docs").string();
  strata::test::CliResult p =
      strata::test::run_cli({"preprocess", "--input", (dir / "docs.jsonl").string(), "--output-prefix", prefix,
                             "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tok.string(),
                             "--append-eod", "--workers", "2"});
  INFO(p.err);
  REQUIRE(p.rc == 0);
  // "ab ab ab x" → <s> ▁ab ▁ab ▁ab ▁ x </s>, then the EOD (</s>): 8 tokens a document.
  CHECK_THAT(p.out, Contains("HuggingFaceTokenizer, 300 documents, 2400 tokens"));
  strata::test::CliResult t = strata::test::run_cli(
      {"train", "--config", (fs::path(STRATA_SOURCE_DIR) / "configs/gpt_tiny.yaml").string(), "--tokenizer-type",
       "HuggingFaceTokenizer", "--tokenizer-model", tok.string(), "--data-path", prefix + "_text_document",
       "--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
       "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "2",
       "--eval-iters", "1", "--eval-interval", "2", "--lr-warmup-iters", "0", "--split", "90,10,0", "training.device=cpu",
       "checkpoint.save=null", "checkpoint.save_interval=null", "logging.tensorboard_dir=null",
       "logging.metrics_jsonl=null"});
  INFO(t.out);
  INFO(t.err);
  REQUIRE(t.rc == 0);
  CHECK_THAT(t.out + t.err, Contains("tokenizer HuggingFaceTokenizer: vocab size 12 (eod 2)"));
  fs::remove_all(dir);
}
