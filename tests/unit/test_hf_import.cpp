// Tests of `strata import --hf` bad inputs and of the export/import CLI: wrong family, missing /
// extra / wrong-shaped tensors, an untied lm_head under tie_word_embeddings, corrupt or missing
// files (each message names the tensor or file); base-model names and HF buffers accepted;
// `strata export` / `strata import` / `strata generate --score` / `strata train … finetune` end to end;
// an export into a directory that holds files needs --force; export --iteration refuses negative
// and names the iterations that exist; shard paths of model.safetensors.index.json (and a checkpoint
// manifest's files) that leave their directory are refused; a failed import leaves nothing.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_helpers.h"
#include "core/formats/safetensors.h"
#include "hf_test_helpers.h"
#include "tokenizer_test_files.h"
#include "training/hf/hf_export.h"
#include "training/inference/generation.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// An exported HF directory of a random model of family f (f32).
fs::path exported(hf::Family f, bool tied, const std::string& name) {
  const fs::path dir = fresh_dir(name);
  StrataConfig cfg = family_config(f, tied, Precision::Fp32);
  save_random_checkpoint(cfg, dir / "ckpt", 5);
  hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
  return dir;
}

// Rewrites hf/model.safetensors after `edit` changes its tensors.
template <typename Edit>
void edit_tensors(const fs::path& hf_dir, Edit edit) {
  const std::string path = (hf_dir / "model.safetensors").string();
  std::map<std::string, Tensor> t;
  for (auto& [n, v] : formats::read_safetensors(path).tensors) t[n] = v.clone();
  edit(t);
  formats::write_safetensors(path, t, {{"format", "pt"}});
}

void edit_config(const fs::path& hf_dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(hf_dir / "config.json"));
  edit(j);
  std::ofstream(hf_dir / "config.json") << j.dump(2);
}

}  // namespace

TEST_CASE("hf import: missing, extra and wrong-shaped tensors name the tensor and the file", "[hf]") {
  const fs::path dir = exported(hf::Family::Llama, false, "bad_tensors");
  const fs::path hf_dir = dir / "hf";
  const std::string save = (dir / "out").string();
  const std::string file = (hf_dir / "model.safetensors").string();
  const fs::path backup = dir / "model.safetensors.orig";
  fs::copy_file(hf_dir / "model.safetensors", backup);
  auto restore = [&] { fs::copy_file(backup, hf_dir / "model.safetensors", fs::copy_options::overwrite_existing); };

  edit_tensors(hf_dir, [](auto& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save),
                    Contains(file) && Contains("tensor 'model.layers.1.mlp.up_proj.weight' is missing"));
  restore();
  edit_tensors(hf_dir, [](auto& t) { t["model.layers.0.self_attn.k_proj.weight"] = Tensor::zeros({8, 32}, DType::F32); });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save),
                    Contains(file) && Contains("tensor 'model.layers.0.self_attn.k_proj.weight' has shape [8, 32]") &&
                        Contains("[16, 32]"));
  restore();
  edit_tensors(hf_dir, [](auto& t) { t["model.layers.2.mlp.up_proj.weight"] = Tensor::zeros({2}, DType::F32); });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save),
                    Contains(file) && Contains("unexpected tensor 'model.layers.2.mlp.up_proj.weight'"));
  restore();
  // The file's own layer count disagrees with config.json.
  edit_config(hf_dir, [](auto& j) { j["num_hidden_layers"] = 3; });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save),
                    Contains("tensor 'model.layers.2.input_layernorm.weight' is missing"));
  edit_config(hf_dir, [](auto& j) { j["num_hidden_layers"] = 2; });
  // HF buffers and base-model names are accepted.
  edit_tensors(hf_dir, [](auto& t) {
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = Tensor::zeros({4}, DType::F32);
    t["norm.weight"] = t.at("model.norm.weight");
    t.erase("model.norm.weight");
  });
  CHECK_NOTHROW(hf::import_checkpoint(hf_dir.string(), save));
  CHECK(fs::exists(dir / "out" / "iter_0000000" / "model_rank_0000.safetensors"));
  CHECK(*read_checkpoint_tracker(save) == 0);
  fs::remove_all(dir);
}

// A crafted model.safetensors.index.json must not make import open files elsewhere: absolute paths,
// ".." and symlinks leading out are refused, naming the index and the entry, before any shard is read.
TEST_CASE("hf import: shard paths outside the directory are refused, naming the index and the entry", "[hf]") {
  const fs::path dir = exported(hf::Family::Llama, false, "shard_paths");
  const fs::path hf_dir = dir / "hf";
  const std::string index = (hf_dir / "model.safetensors.index.json").string();
  // A real sharded directory first: the tensors split over two files, one in a subfolder.
  std::map<std::string, Tensor> all, first, second;
  for (auto& [n, v] : formats::read_safetensors((hf_dir / "model.safetensors").string()).tensors) all[n] = v.clone();
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [n, v] : all) {
    const bool one = n.find("layers.1.") == std::string::npos;
    (one ? first : second)[n] = v;
    map[n] = one ? "model-00001-of-00002.safetensors" : "shards/model-00002-of-00002.safetensors";
  }
  fs::remove(hf_dir / "model.safetensors");
  fs::create_directories(hf_dir / "shards");
  formats::write_safetensors((hf_dir / "model-00001-of-00002.safetensors").string(), first, {{"format", "pt"}});
  formats::write_safetensors((hf_dir / "shards" / "model-00002-of-00002.safetensors").string(), second,
                             {{"format", "pt"}});
  auto write_index = [&](const nlohmann::json& m) { std::ofstream(index) << nlohmann::json{{"weight_map", m}}.dump(1); };
  write_index(map);
  CHECK_NOTHROW(hf::import_checkpoint(hf_dir.string(), (dir / "good").string()));

  // The same tensors outside the directory, reached three ways.
  fs::create_directories(dir / "elsewhere");
  fs::copy_file(hf_dir / "shards" / "model-00002-of-00002.safetensors", dir / "elsewhere" / "s.safetensors");
  fs::create_directory_symlink(dir / "elsewhere", hf_dir / "link");
  const std::string entry = "model.layers.1.mlp.up_proj.weight";
  const std::pair<std::string, std::string> bad[] = {
      {"../../../../etc/passwd", "climbs out with '..'"},
      {"shards/../../elsewhere/s.safetensors", "climbs out with '..'"},
      {(dir / "elsewhere" / "s.safetensors").string(), "an absolute path"},
      {"link/s.safetensors", "through a symlink"},
  };
  for (const auto& [path, why] : bad) {
    DYNAMIC_SECTION(path) {
      nlohmann::json m = map;
      m[entry] = path;
      write_index(m);
      CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), (dir / "bad").string()),
                        Contains(index) && Contains("weight_map entry '" + entry + "'") && Contains(path) &&
                            Contains(why));
      CHECK_FALSE(fs::exists(dir / "bad"));
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a manifest's files outside the iteration directory are refused", "[hf][checkpoint]") {
  const fs::path dir = fresh_dir("manifest_paths");
  StrataConfig cfg = family_config(hf::Family::Llama, true, Precision::Fp32);
  save_random_checkpoint(cfg, dir / "ckpt", 4);
  const fs::path manifest = dir / "ckpt" / "iter_0000007" / "manifest.json";
  nlohmann::json m = read_json(manifest);
  const std::string evil = "../../elsewhere/model_rank_0000.safetensors";
  fs::create_directories(dir / "elsewhere");
  fs::copy_file(dir / "ckpt" / "iter_0000007" / "model_rank_0000.safetensors", dir / "elsewhere" / "model_rank_0000.safetensors");
  m["files"][evil] = m["files"]["model_rank_0000.safetensors"];
  for (auto& t : m["tensors"])
    for (auto& piece : t["pieces"])
      if (piece["file"] == "model_rank_0000.safetensors") piece["file"] = evil;
  std::ofstream(manifest) << m.dump(1);
  CHECK_THROWS_WITH(hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string()),
                    Contains(manifest.string()) && Contains(evil) && Contains("climbs out with '..'"));
  fs::remove_all(dir);
}

TEST_CASE("hf import: corrupt files, wrong family and bad config.json", "[hf]") {
  const fs::path dir = exported(hf::Family::GPT2, true, "bad_files");
  const fs::path hf_dir = dir / "hf";
  const std::string save = (dir / "out").string();
  const std::string file = (hf_dir / "model.safetensors").string();

  // A tied lm_head that is not the embedding table.
  edit_tensors(hf_dir, [](auto& t) { t["lm_head.weight"] = Tensor::zeros({257, 32}, DType::F32); });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save),
                    Contains("'lm_head.weight' differs from 'transformer.wte.weight'"));
  // An equal one is the usual tied duplicate: accepted, as are GPT-2's attention-mask buffers.
  edit_tensors(hf_dir, [](auto& t) {
    t["lm_head.weight"] = t.at("transformer.wte.weight");
    t["transformer.h.0.attn.bias"] = Tensor::zeros({1, 1, 16, 16}, DType::F32);
  });
  CHECK_NOTHROW(hf::import_checkpoint(hf_dir.string(), save));
  fs::remove_all(save);  // a save directory holding a checkpoint is refused (tested below)

  // Truncated safetensors.
  fs::resize_file(file, fs::file_size(file) - 10);
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save), Contains(file));
  fs::remove(file);
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save), Contains("has no model.safetensors"));

  edit_config(hf_dir, [](auto& j) { j["architectures"] = {"MistralForCausalLM"}; j["model_type"] = "mistral"; });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save),
                    Contains("config.json") && Contains("MistralForCausalLM") && Contains("neither"));
  edit_config(hf_dir, [](auto& j) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["activation_function"] = "relu";
  });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save), Contains("activation_function 'relu'"));
  edit_config(hf_dir, [](auto& j) {
    j["activation_function"] = "gelu_new";
    j.erase("n_embd");
  });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save), Contains("config key 'n_embd' is missing"));
  std::ofstream(hf_dir / "config.json") << "{not json";
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save), Contains("config.json is not valid JSON"));
  fs::remove(hf_dir / "config.json");
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), save), Contains("config.json is missing"));
  fs::remove_all(dir);
}

TEST_CASE("hf: a Llama config.json without strata's hints imports with HF's vocabulary", "[hf]") {
  const fs::path dir = exported(hf::Family::Llama, true, "plain_llama");
  const fs::path hf_dir = dir / "hf";
  edit_config(hf_dir, [](auto& j) {
    j.erase("strata");
    j.erase("head_dim");
    j["eos_token_id"] = {256, 255};
  });
  const hf::ImportResult r = hf::import_checkpoint(hf_dir.string(), (dir / "out").string(),
                                                   {"training.device=cpu", "model.seq_length=8"});
  CHECK(*r.config.model->vocab_size == 257);  // config.json vocab_size: the real vocabulary
  CHECK(r.config.model->make_vocab_size_divisible_by == 1);
  CHECK(r.config.model->seq_length == 8);
  CHECK(r.config.model.max_positions() == 16);
  CHECK(r.config.model.query_groups() == 2);
  CHECK(r.config.model.head_dim() == 8);
  CHECK(r.config.data->tokenizer_type == TokenizerType::NullTokenizer);
  fs::remove_all(dir);
}

TEST_CASE("hf import: an export with the padded vocabulary (before it was dropped) still imports", "[hf]") {
  const fs::path dir = exported(hf::Family::Llama, false, "old_padded");
  const fs::path hf_dir = dir / "hf";
  // Rewrite it as exports used to be: 320 rows (257 real + padding) and vocab_size 320.
  edit_tensors(hf_dir, [](auto& t) {
    for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
      Tensor padded = Tensor::zeros({320, 32}, DType::F32);
      padded.narrow(0, 0, 257).copy_(t.at(name));
      t[name] = padded;
    }
  });
  edit_config(hf_dir, [](auto& j) { j["vocab_size"] = 320; });
  const hf::ImportResult r = hf::import_checkpoint(hf_dir.string(), (dir / "out").string());
  CHECK(*r.config.model->vocab_size == 257);
  CHECK(r.config.model->make_vocab_size_divisible_by == 64);
  // A config.json vocabulary that is neither the real nor the padded size is an error.
  edit_config(hf_dir, [](auto& j) { j["vocab_size"] = 300; });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), (dir / "out2").string()),
                    Contains("does not match the config's vocab_size 300"));
  fs::remove_all(dir);
}

TEST_CASE("hf cli: export, import, generate --score and finetune from the import", "[hf]") {
  const fs::path dir = fresh_dir("cli");
  StrataConfig cfg = family_config(hf::Family::GPT2, true, Precision::Fp32);
  save_random_checkpoint(cfg, dir / "ckpt", 9);
  const std::string ckpt = (dir / "ckpt").string(), hf_dir = (dir / "hf").string(), out = (dir / "out").string();

  CliResult r = run_cli({"export", "--help"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("LlamaForCausalLM") && Contains("GPT2LMHeadModel") && Contains("--iteration"));
  r = run_cli({"import", "--help"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("--config-override") && Contains("iter_0000000"));

  r = run_cli({"export", "--load", ckpt, "--format", "onnx", "--out", hf_dir});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("--format 'onnx' is not supported"));
  r = run_cli({"export", "--load", ckpt, "--format", "hf", "--out", hf_dir, "--iteration", "3"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("no checkpoint at iteration 3") && Contains("iter_0000003 is missing") &&
                        Contains("it holds iter_0000007"));
  r = run_cli({"export", "--load", ckpt, "--format", "hf", "--out", hf_dir, "--iteration", "-1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("--iteration must be >= 0, got -1"));
  CHECK_FALSE(fs::exists(dir / "hf"));
  r = run_cli({"export", "--load", (dir / "none").string(), "--format", "hf", "--out", hf_dir});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("is not a directory"));

  r = run_cli({"export", "--load", ckpt, "--format", "hf", "--out", hf_dir, "--iteration", "7"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("GPT2LMHeadModel") && Contains("model.safetensors"));
  r = run_cli({"import", "--hf", hf_dir, "--save", out, "--config-override", "training.device=cpu"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("iter_0000000"));
  // A directory that holds a run already: refused (its tracker would be rewritten), unless --force.
  r = run_cli({"import", "--hf", hf_dir, "--save", ckpt});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ") && Contains("already holds a checkpoint") && Contains("--force"));
  CHECK(*read_checkpoint_tracker(ckpt) == 7);  // untouched
  CHECK_FALSE(fs::exists(dir / "ckpt" / "iter_0000000"));
  fs::create_directories(dir / "iters_only" / "iter_0000100");
  r = run_cli({"import", "--hf", hf_dir, "--save", (dir / "iters_only").string()});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("already holds a checkpoint (iter_0000100)"));
  r = run_cli({"import", "--hf", hf_dir, "--save", (dir / "iters_only").string(), "--force"});
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK(*read_checkpoint_tracker((dir / "iters_only").string()) == 0);
  fs::create_directories(dir / "empty_dir");
  CHECK(run_cli({"import", "--hf", hf_dir, "--save", (dir / "empty_dir").string()}).rc == 0);  // empty: fine

  r = run_cli({"generate", "--load", ckpt, "--prompt-ids", "1,2,3,4", "--score"});
  REQUIRE(r.rc == 0);
  const auto want = nlohmann::json::parse(r.out);
  r = run_cli({"generate", "--load", out, "--prompt-ids", "1,2,3,4", "--score"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(nlohmann::json::parse(r.out) == want);  // same weights, same numbers

  // The imported checkpoint's own config trains from it with finetune (no optimizer state needed).
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(dir / "out" / "iter_0000000" / "manifest.json"));
  std::ofstream(dir / "imported.yaml") << manifest.at("config").get<std::string>();
  r = run_cli({"train", "--config", (dir / "imported.yaml").string(), "checkpoint.load=" + out,
               "checkpoint.finetune=true", "training.train_iters=1", "training.micro_batch_size=2",
               "training.global_batch_size=2", "training.eval_iters=0", "logging.log_interval=1",
               "training.device=cpu"});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  r = run_cli({"train", "--config", (dir / "imported.yaml").string(), "checkpoint.load=" + out,
               "training.train_iters=2", "training.device=cpu"});
  CHECK(r.rc != 0);
  CHECK_THAT(r.err, Contains("no optimizer state"));
  fs::remove_all(dir);
}

TEST_CASE("hf cli: export into a directory that holds files is refused unless --force", "[hf]") {
  // As import: the export's files would silently mix with what is there (e.g. a sharded
  // model.safetensors.index.json next to the new model.safetensors).
  const fs::path dir = fresh_dir("export_force");
  StrataConfig cfg = family_config(hf::Family::GPT2, true, Precision::Fp32);
  save_random_checkpoint(cfg, dir / "ckpt", 9);
  const std::string ckpt = (dir / "ckpt").string(), hf_dir = (dir / "hf").string();
  fs::create_directories(dir / "hf");
  std::ofstream(dir / "hf" / "model.safetensors.index.json") << "{}";
  CliResult r = run_cli({"export", "--load", ckpt, "--format", "hf", "--out", hf_dir});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ") && Contains("--out " + hf_dir + " is not empty") &&
                        Contains("model.safetensors.index.json") && Contains("--force"));
  CHECK_FALSE(fs::exists(dir / "hf" / "model.safetensors"));
  r = run_cli({"export", "--load", ckpt, "--format", "hf", "--out", hf_dir, "--force"});
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK(fs::exists(dir / "hf" / "model.safetensors"));
  CHECK(fs::exists(dir / "hf" / "model.safetensors.index.json"));  // left, as --force says
  // An existing empty directory is fine; a file is not a directory.
  fs::create_directories(dir / "empty");
  CHECK(run_cli({"export", "--load", ckpt, "--format", "hf", "--out", (dir / "empty").string()}).rc == 0);
  std::ofstream(dir / "a_file") << "x";
  r = run_cli({"export", "--load", ckpt, "--format", "hf", "--out", (dir / "a_file").string(), "--force"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("exists and is not a directory"));
  fs::remove_all(dir);
}

TEST_CASE("hf import keeps the directory's tokenizer.json, which generate and export use", "[hf][tokenizer_hf]") {
  const fs::path dir = exported(hf::Family::Llama, true, "tokenizer_files");
  const fs::path hf_dir = dir / "hf";
  std::ofstream(hf_dir / "tokenizer.json") << test::sp_style_tokenizer().dump(1);
  std::ofstream(hf_dir / "tokenizer_config.json") << test::kSpecials;
  const hf::ImportResult r =
      hf::import_checkpoint(hf_dir.string(), (dir / "imported").string(), {"training.device=cpu"});
  CHECK(r.config.data->tokenizer_type == TokenizerType::HuggingFaceTokenizer);
  // The save keeps a copy in the iteration (training/checkpointing/checkpoint_tokenizer.h).
  CHECK(file_bytes(dir / "imported" / "iter_0000000" / "tokenizer" / "tokenizer.json") ==
        file_bytes(hf_dir / "tokenizer.json"));
  CHECK_FALSE(fs::exists(dir / "imported" / "tokenizer"));
  // generate --prompt on the import needs no extra flag: the checkpoint's config names the files.
  const generation::LoadedModel lm = generation::load_for_inference((dir / "imported").string());
  CHECK(lm.tokenizer->name() == "HuggingFaceTokenizer");
  CHECK(lm.tokenizer->encode("ab ab") == std::vector<int64_t>{1, 7, 7, 2});
  // Exported again, the HF directory holds the same tokenizer files and names BOS and EOS.
  const hf::ExportResult e = hf::export_checkpoint((dir / "imported").string(), (dir / "again").string());
  CHECK(std::count(e.files.begin(), e.files.end(), "tokenizer.json") == 1);
  CHECK(file_bytes(dir / "again" / "tokenizer.json") == file_bytes(hf_dir / "tokenizer.json"));
  CHECK(file_bytes(dir / "again" / "tokenizer_config.json") == file_bytes(hf_dir / "tokenizer_config.json"));
  const nlohmann::json config = read_json(dir / "again" / "config.json");
  CHECK(config["bos_token_id"] == 1);
  CHECK(config["eos_token_id"] == 2);
  // A broken tokenizer file fails the import, naming the directory's file (not a copy), and leaves
  // nothing behind.
  std::ofstream(hf_dir / "tokenizer.json") << "{\"model\": ";
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), (dir / "broken").string(), {"training.device=cpu"}),
                    Contains((hf_dir / "tokenizer.json").string() + ": not valid JSON"));
  CHECK_FALSE(fs::exists(dir / "broken"));
  fs::create_directories(dir / "broken");  // an existing --save directory is left as it was
  CHECK_THROWS(hf::import_checkpoint(hf_dir.string(), (dir / "broken").string(), {"training.device=cpu"}));
  CHECK(fs::is_empty(dir / "broken"));
  fs::remove_all(dir);
}
