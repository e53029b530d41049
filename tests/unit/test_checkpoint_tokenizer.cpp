// Tests of the tokenizer a checkpoint carries (training/checkpointing/checkpoint_tokenizer.h): a
// saved iteration holds copies of its tokenizer files (listed in the manifest with size and CRC-32C),
// so a moved or copied checkpoint, or one saved with a relative tokenizer path, exports and generates
// with its own tokenizer, and never silently with the original's; `strata export` of a checkpoint
// whose tokenizer cannot be loaded fails naming the file and writes nothing (staging directory).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_helpers.h"
#include "hf_test_helpers.h"
#include "tokenizer_test_files.h"
#include "training/hf/hf_export.h"
#include "training/inference/generation.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A tokenizer.json + tokenizer_config.json directory (12 ids, BOS 1, EOS 2).
void write_tokenizer(const fs::path& d) {
  fs::create_directories(d);
  std::ofstream(d / "tokenizer.json") << test::sp_style_tokenizer().dump(1);
  std::ofstream(d / "tokenizer_config.json") << test::kSpecials;
}

StrataConfig config_with_tokenizer(const std::string& tokenizer_model) {
  StrataConfig cfg = family_config(hf::Family::Llama, true, Precision::Fp32);
  cfg.data.tokenizer_type = TokenizerType::HuggingFaceTokenizer;
  cfg.data.tokenizer_model = tokenizer_model;
  return cfg;
}

// The working directory for one scope (a relative tokenizer path at save time).
struct InDirectory {
  fs::path saved = fs::current_path();
  explicit InDirectory(const fs::path& d) { fs::current_path(d); }
  ~InDirectory() { fs::current_path(saved); }
};

}  // namespace

TEST_CASE("checkpoint tokenizer: a moved checkpoint exports and generates with its own copies", "[hf][checkpoint]") {
  const fs::path dir = fresh_dir("ckpt_tok_moved");
  write_tokenizer(dir / "tok");
  StrataConfig cfg = config_with_tokenizer((dir / "tok").string());
  save_random_checkpoint(cfg, dir / "run", 5);
  const fs::path iter = dir / "run" / "iter_0000007";
  const nlohmann::json m = read_json(iter / "manifest.json");
  CHECK(m.at("tokenizer").at("type") == "HuggingFaceTokenizer");
  CHECK(m.at("tokenizer").at("fields").at("tokenizer_model") == "tokenizer/tokenizer.json");
  CHECK(m.at("tokenizer").at("files").contains("tokenizer/tokenizer_config.json"));
  CHECK(file_bytes(iter / "tokenizer" / "tokenizer.json") == file_bytes(dir / "tok" / "tokenizer.json"));

  // The checkpoint moves; the tokenizer it was trained with disappears.
  fs::rename(dir / "run", dir / "moved");
  fs::rename(dir / "tok", dir / "tok_gone");
  const hf::ExportResult e = hf::export_checkpoint((dir / "moved").string(), (dir / "hf").string());
  CHECK(std::count(e.files.begin(), e.files.end(), "tokenizer.json") == 1);
  CHECK(file_bytes(dir / "hf" / "tokenizer.json") == file_bytes(dir / "tok_gone" / "tokenizer.json"));
  const nlohmann::json config = read_json(dir / "hf" / "config.json");
  CHECK(config.at("bos_token_id") == 1);
  CHECK(config.at("eos_token_id") == 2);
  const generation::LoadedModel lm = generation::load_for_inference((dir / "moved").string());
  CHECK(lm.tokenizer->encode("ab ab") == std::vector<int64_t>{1, 7, 7, 2});
  // ... and the export imports back with that tokenizer.
  const hf::ImportResult back = hf::import_checkpoint((dir / "hf").string(), (dir / "back").string());
  CHECK(back.config.data->tokenizer_type == TokenizerType::HuggingFaceTokenizer);
  CHECK(file_bytes(dir / "back" / "iter_0000000" / "tokenizer" / "tokenizer.json") ==
        file_bytes(dir / "tok_gone" / "tokenizer.json"));

  // A copy never silently uses the original's tokenizer: with the original back in place, an
  // altered or missing copy is an error naming the copy, and nothing is written.
  fs::rename(dir / "tok_gone", dir / "tok");
  const fs::path copy = dir / "moved" / "iter_0000007" / "tokenizer" / "tokenizer.json";
  std::ofstream(copy, std::ios::app) << " ";
  CHECK_THROWS_WITH(hf::export_checkpoint((dir / "moved").string(), (dir / "hf2").string()),
                    Contains(copy.string()) && Contains("does not match its size and CRC-32C"));
  CHECK_THROWS_WITH(generation::load_for_inference((dir / "moved").string()), Contains(copy.string()));
  fs::remove(copy);
  CHECK_THROWS_WITH(hf::export_checkpoint((dir / "moved").string(), (dir / "hf2").string()),
                    Contains(copy.string()) && Contains("is missing"));
  CHECK_FALSE(fs::exists(dir / "hf2"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint tokenizer: a relative tokenizer path is resolved when the checkpoint is saved",
          "[hf][checkpoint]") {
  const fs::path dir = fresh_dir("ckpt_tok_relative");
  write_tokenizer(dir / "work" / "tok");
  {
    InDirectory in(dir / "work");  // as a training run started in work/ with --tokenizer-model tok
    StrataConfig cfg = config_with_tokenizer("tok");
    save_random_checkpoint(cfg, dir / "run", 6);
  }
  // Elsewhere, the saved config's "tok" names nothing; the checkpoint's copy is used.
  const hf::ExportResult e = hf::export_checkpoint((dir / "run").string(), (dir / "hf").string());
  CHECK(file_bytes(dir / "hf" / "tokenizer.json") == file_bytes(dir / "work" / "tok" / "tokenizer.json"));
  CHECK(read_json(dir / "hf" / "config.json").at("eos_token_id") == 2);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint tokenizer: export of a checkpoint whose tokenizer is gone fails naming it, writing nothing",
          "[hf][checkpoint]") {
  const fs::path dir = fresh_dir("ckpt_tok_gone");
  write_tokenizer(dir / "tok");
  StrataConfig cfg = config_with_tokenizer((dir / "tok").string());
  save_random_checkpoint(cfg, dir / "run", 7);
  // A checkpoint saved before checkpoints carried their tokenizer: no "tokenizer" in the manifest,
  // only the config's path, which has moved.
  const fs::path manifest = dir / "run" / "iter_0000007" / "manifest.json";
  nlohmann::json m = read_json(manifest);
  m.erase("tokenizer");
  std::ofstream(manifest) << m.dump(1);
  fs::remove_all(dir / "run" / "iter_0000007" / "tokenizer");
  fs::rename(dir / "tok", dir / "tok_moved");
  const std::string missing = (dir / "tok").string();
  CHECK_THROWS_WITH(hf::export_checkpoint((dir / "run").string(), (dir / "hf").string()),
                    Contains(missing) && Contains("does not exist") && Contains("could not be imported back"));
  CHECK_FALSE(fs::exists(dir / "hf"));
  // Into a directory that holds files (--force): left as it was, no staging directory either.
  fs::create_directories(dir / "kept");
  std::ofstream(dir / "kept" / "config.json") << "{}";
  const CliResult r = run_cli({"export", "--load", (dir / "run").string(), "--format", "hf", "--out",
                               (dir / "kept").string(), "--force"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains(missing));
  CHECK(file_bytes(dir / "kept" / "config.json") == "{}");
  CHECK(std::distance(fs::directory_iterator(dir / "kept"), fs::directory_iterator()) == 1);
  for (const auto& entry : fs::directory_iterator(dir)) CHECK(entry.path().filename().string().find("tmp") == std::string::npos);
  // With the tokenizer back where the config says, the old checkpoint exports as before.
  fs::rename(dir / "tok_moved", dir / "tok");
  CHECK_NOTHROW(hf::export_checkpoint((dir / "run").string(), (dir / "kept").string(), std::nullopt, true));
  CHECK(fs::exists(dir / "kept" / "tokenizer.json"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint tokenizer: a TikTokenizer vocabulary and its settings travel through export and import",
          "[hf][checkpoint][tiktoken]") {
  const fs::path dir = fresh_dir("ckpt_tok_tiktoken");
  fs::create_directories(dir / "tok");
  std::ofstream(dir / "tok" / "vocab.json") << test::tiktoken_vocab_json({"ab", "bc", "abc", "xyz"});
  StrataConfig cfg = family_config(hf::Family::Llama, true, Precision::Fp32);
  cfg.data.tokenizer_type = TokenizerType::TikTokenizer;
  cfg.data.tokenizer_model = (dir / "tok" / "vocab.json").string();
  cfg.data.tiktoken_pattern = TiktokenPattern::v1;
  cfg.data.tiktoken_num_special_tokens = 9;
  cfg.data.tokenizer_special_tokens = {"<pad>", "</s>", "<s>", "<unk>", "<mask>", "<cls>", "<sep>", "<|im_end|>"};
  cfg.model.vocab_size = 9 + 256 + 4;
  save_random_checkpoint(cfg, dir / "run", 8);
  const fs::path iter = dir / "run" / "iter_0000007";
  const nlohmann::json m = read_json(iter / "manifest.json");
  CHECK(m.at("tokenizer").at("fields").at("tokenizer_model") == "tokenizer/tiktoken.json");
  CHECK(file_bytes(iter / "tokenizer" / "tiktoken.json") == file_bytes(dir / "tok" / "vocab.json"));

  fs::rename(dir / "tok", dir / "tok_gone");
  const hf::ExportResult e = hf::export_checkpoint((dir / "run").string(), (dir / "hf").string());
  CHECK(std::count(e.files.begin(), e.files.end(), "tiktoken.json") == 1);
  const nlohmann::json config = read_json(dir / "hf" / "config.json");
  CHECK(config.at("eos_token_id") == 1);  // </s> of the custom list
  CHECK(config.at("bos_token_id") == 2);
  CHECK(config.at("strata").at("tokenizer").at("tiktoken_pattern") == "v1");
  // The generation tokenizer: ids 0..8 special, "abc" = entry 258 → id 267; "x<|im_end|>" → x, 7.
  const generation::LoadedModel lm = generation::load_for_inference((dir / "run").string());
  CHECK(lm.tokenizer->encode("abc x<|im_end|>") == std::vector<int64_t>{267, 9 + ' ', 9 + 'x', 7});
  const hf::ImportResult back = hf::import_checkpoint((dir / "hf").string(), (dir / "back").string());
  const DataConfig& d = *back.config.data;
  CHECK(d.tokenizer_type == TokenizerType::TikTokenizer);
  CHECK(d.tiktoken_pattern == TiktokenPattern::v1);
  CHECK(d.tiktoken_num_special_tokens == 9);
  CHECK(d.tokenizer_special_tokens == cfg.data.tokenizer_special_tokens);
  CHECK(file_bytes(dir / "back" / "iter_0000000" / "tokenizer" / "tiktoken.json") ==
        file_bytes(dir / "tok_gone" / "vocab.json"));
  fs::remove_all(dir);
}
