// Helpers for the Hugging Face export/import tests (test_hf_export.cpp, test_hf_import.cpp,
// test_hf_moe.cpp, test_hf_nemotron_h.cpp, …): small Llama / Qwen3 / GPT-2 / Mixtral / Qwen3-MoE configs, random checkpoints of
// them, running the scripts under tests/hf with /usr/bin/python3 (the numpy reference) or with the
// project's .pyenv/bin/python (transformers' own config classes: hf_transformers_config.py; its
// YaRN parameters: hf_yarn_parameters.py), and comparing logits.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt/gpt_model.h"
#include "models/hybrid/hybrid_model.h"
#include "test_helpers.h"
#include "training/checkpointing/checkpoint.h"
#include "training/hf/hf_format.h"
#include "training/checkpointing/tensor_file.h"
#include "training/config/model_factory.h"
#if __has_include("strata_source_dir.h")
#include "strata_source_dir.h"
#endif

namespace strata::test {

namespace fs = std::filesystem;

inline fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("strata_test_hf_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

inline bool numpy_available() {
  static const bool available = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return available;
}

// tests/hf/<name> in the source tree.
inline fs::path hf_script(const char* name) {
  return fs::path(STRATA_SOURCE_DIR) / "tests" / "hf" / name;
}

// Runs a shell command; its output (stdout and stderr) and its pclose status.
inline std::pair<std::string, int> run_command(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return {out, pclose(p)};
}

// Runs /usr/bin/python3 tests/hf/<script> args…; nullopt when it exits 77 (torch/transformers
// missing), else its stdout (the test fails on any other non-zero exit).
// hf_transformers_logits.py runs with $STRATA_TRANSFORMERS_PYTHON when set (a Python with torch and
// transformers, e.g. a scratch venv), else /usr/bin/python3 too.
inline std::optional<std::string> run_script(const char* script, const std::string& args) {
  REQUIRE(fs::exists(hf_script(script)));
  const char* torch_python = std::getenv("STRATA_TRANSFORMERS_PYTHON");
  const std::string python = std::string(script) == "hf_transformers_logits.py" && torch_python && *torch_python
                                 ? std::string(torch_python)
                                 : std::string("/usr/bin/python3");
  const std::string cmd = python + " " + hf_script(script).string() + " " + args + " 2>&1";
  const auto [out, status] = run_command(cmd);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return std::nullopt;
  INFO(cmd << "\n" << out);
  REQUIRE(status == 0);
  return out;
}

// Logits [s][padded vocab] of the HF directory for `ids` from tests/hf/<script>.
inline std::optional<std::vector<std::vector<double>>> script_logits(const char* script, const fs::path& hf_dir,
                                                              const std::vector<int64_t>& ids) {
  std::string ids_text;
  for (int64_t i : ids) ids_text += (ids_text.empty() ? "" : ",") + std::to_string(i);
  const std::optional<std::string> out = run_script(script, hf_dir.string() + " " + ids_text);
  if (!out) return std::nullopt;
  // transformers may log warnings before the JSON line: parse the last line.
  std::string line = *out;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  line = line.substr(line.find_last_of('\n') == std::string::npos ? 0 : line.find_last_of('\n') + 1);
  return nlohmann::json::parse(line).at("logits").get<std::vector<std::vector<double>>>();
}

// max |a - b| over the first `v` columns of s rows; b row-major [s, v].
inline double max_logit_diff(const std::vector<std::vector<double>>& a, const std::vector<double>& b, int64_t v,
                      double* max_abs = nullptr) {
  double d = 0, m = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (int64_t j = 0; j < v; ++j) {
      d = std::max(d, std::abs(a[t][static_cast<size_t>(j)] - b[t * static_cast<size_t>(v) + static_cast<size_t>(j)]));
      m = std::max(m, std::abs(a[t][static_cast<size_t>(j)]));
    }
  if (max_abs) *max_abs = m;
  return d;
}

// The Python of the project's setup (scripts/setup.sh: .pyenv with transformers and safetensors).
inline fs::path pyenv_python() { return fs::path(STRATA_SOURCE_DIR) / ".pyenv" / "bin" / "python"; }

// Runs .pyenv/bin/python tests/hf/<script> args… and returns the JSON of its last line. A missing
// .pyenv or transformers fails the test (scripts/setup.sh installs them): the transformers checks
// never pass by being skipped.
inline nlohmann::json pyenv_script_json(const char* script, const std::string& args) {
  INFO("run scripts/setup.sh: it makes .pyenv with transformers " << hf::kTransformersVersion << " and safetensors");
  REQUIRE(fs::exists(pyenv_python()));
  const std::string cmd = pyenv_python().string() + " " + hf_script(script).string() + " " + args + " 2>&1";
  auto [out, status] = run_command(cmd);
  INFO(cmd << "\n" << out);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return nlohmann::json::parse(out.substr(out.find_last_of('\n') == std::string::npos ? 0 : out.find_last_of('\n') + 1));
}

// tests/hf/hf_transformers_config.py args… (transformers' own config classes).
inline nlohmann::json transformers_config(const std::string& args) {
  return pyenv_script_json("hf_transformers_config.py", args);
}

inline nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(std::ifstream(p)); }

inline std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void edit_hf_config(const fs::path& hf_dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = read_json(hf_dir / "config.json");
  edit(j);
  std::ofstream(hf_dir / "config.json") << j.dump(2);
}

// A small validated config of each family (ByteLevelTokenizer: vocab 257, padded to 320).
inline StrataConfig family_config(hf::Family f, bool tied, Precision precision) {
  StrataConfig c;
  ModelConfig& m = c.model;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.seq_length = 16;
  m.max_position_embeddings = 16;
  m.make_vocab_size_divisible_by = 64;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.init_method_std = 0.3;
  m.layernorm_epsilon = 1e-5;
  m.untie_embeddings_and_output_weights = !tied;
  if (f != hf::Family::GPT2) {
    m.qk_layernorm = hf::has_qk_norm(f);
    m.normalization = Normalization::RMSNorm;
    m.swiglu = true;
    m.position_embedding_type = PositionEmbeddingType::Rope;
    m.add_bias_linear = false;
    m.group_query_attention = true;
    m.num_query_groups = 2;
    m.ffn_hidden_size = 48;
  } else {
    m.normalization = Normalization::LayerNorm;
    m.openai_gelu = true;
    m.position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
    m.add_bias_linear = true;
    m.ffn_hidden_size = 64;
  }
  c.training.precision = precision;
  c.training.device = "cpu";
  c.optimizer.lr = 1e-3;
  c.data.mock_data = true;
  c.model.vocab_size = 257;
  if (hf::is_moe(f)) {
    // 4 experts of FFN 24, top-2; Qwen3-MoE: layer 0 dense (FFN 48), layer 1 MoE. The router
    // losses are on, so their (training-only) settings travel through config.json's "strata".
    m.num_experts = 4;
    m.moe_ffn_hidden_size = 24;
    m.moe_router_topk = 2;
    if (f == hf::Family::Qwen3Moe) m.moe_layer_freq = {"0", "1"};
    m.moe_router_load_balancing_type = {"aux_loss"};
    m.moe_aux_loss_coeff = {0.01};
    m.moe_z_loss_coeff = 1e-3;
  }
  return c;
}

// Gives every parameter the init does not draw at random a random value (norm weights around 1,
// biases around 0, so that a mixed-up name shows) and saves the model as iteration 7 under dir.
inline void randomize_and_save(LanguageModel& model, const ResolvedConfig& cfg, const fs::path& dir, uint64_t seed) {
  model.init_parameters(seed);
  uint64_t k = seed * 100;
  // The parameters and the MoE routers' expert biases (checkpointed buffers).
  const std::vector<Parameter*> tensors = checkpoint_tensors({&model});
  for (Parameter* p : tensors) {
    if (p->init_std > 0) continue;
    const bool gamma = p->init_value == 1.0 || p->name.find("weight") != std::string::npos;
    p->value.copy_(test::random_tensor(p->value.shape(), ++k, gamma ? 0.5 : -0.3, gamma ? 1.5 : 0.3));
  }
  CheckpointState st;
  st.iteration = 7;
  st.seed = 1;
  st.config_yaml = cfg.to_yaml();
  save_checkpoint(dir.string(), st, tensors, nullptr, *make_default_tensor_file_io());
}

// A GPT model with random weights saved as iteration 7 under dir (with the config resolved for one rank).
inline std::unique_ptr<GPTModel> save_random_checkpoint(const StrataConfig& raw, const fs::path& dir, uint64_t seed) {
  const ResolvedConfig cfg = raw.validate(1);
  auto model = make_gpt_model(cfg, Device::cpu());
  randomize_and_save(*model, cfg, dir, seed);
  return model;
}

// The same for any model the factory builds (a hybrid model, model.hybrid_layer_pattern).
inline std::unique_ptr<LanguageModel> save_random_model(const StrataConfig& raw, const fs::path& dir, uint64_t seed) {
  const ResolvedConfig cfg = raw.validate(1);
  auto model = make_model(cfg, Device::cpu());
  randomize_and_save(*model, cfg, dir, seed);
  return model;
}

// The logits [s][vocab] (row-major, the real vocabulary) of `model`'s weights computed by Strata in
// f64 (an F64 GPTModel or HybridModel holding the same values), for comparing the semantics with
// the f64 numpy reference without f32 rounding.
// An f32 MoE router (model.moe_router_dtype fp32) is computed in f64 there.
inline std::vector<double> f64_logits(LanguageModel& model, const StrataConfig& raw, const std::vector<int64_t>& ids) {
  StrataConfig in_f64 = raw;
  if (in_f64.model.moe_router_dtype) in_f64.model.moe_router_dtype = MoeRouterDtype::Fp64;
  const ResolvedConfig cfg = in_f64.validate(1);
  LanguageModelOptions o;
  o.dtype = DType::F64;
  std::unique_ptr<LanguageModel> f64;
  if (cfg.model->is_hybrid()) {
    f64 = std::make_unique<HybridModel>(cfg.model, o);
  } else {
    GPTModelOptions g;
    static_cast<LanguageModelOptions&>(g) = o;
    f64 = std::make_unique<GPTModel>(cfg.model, g);
  }
  std::map<std::string, Parameter*> theirs;
  for (Parameter* p : checkpoint_tensors({&model})) theirs[p->name] = p;
  for (Parameter* p : checkpoint_tensors({f64.get()})) {
    INFO(p->name);
    REQUIRE(theirs.count(p->name));
    p->value.copy_(theirs.at(p->name)->value);
  }
  const Tensor logits =
      f64->logits_for(Tensor::from_data(ids, Shape{1, static_cast<int64_t>(ids.size())}), nullptr, 0);
  const std::vector<double> all = logits.to_vector();
  const int64_t padded = logits.size(2), v = *cfg.model->vocab_size;
  std::vector<double> out;
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t j = 0; j < v; ++j) out.push_back(all[t * static_cast<size_t>(padded) + static_cast<size_t>(j)]);
  return out;
}

// The tiny model the HF family tests share: hidden 32, 4 heads, sequence 16, the vocabulary padded to
// a multiple of 64, RMSNorm, no dropout, init std 0.3 (so that the logits spread); each test sets
// its family's own fields on top. kHfTestIds: the prompt they score (13 tokens of a 257 vocabulary).
inline void set_tiny_hf_model(ModelConfig& m) {
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.seq_length = 16;
  m.make_vocab_size_divisible_by = 64;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.init_method_std = 0.3;
  m.normalization = Normalization::RMSNorm;
}
inline const std::vector<int64_t> kHfTestIds = {3, 250, 17, 256, 99, 0, 128, 42, 7, 200, 5, 64, 31};

}  // namespace strata::test
