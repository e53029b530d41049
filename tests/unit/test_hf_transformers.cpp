// Hugging Face directories as transformers 5 writes and reads them (training/hf/hf_format.h), proved
// with the transformers that scripts/setup.sh pins (hf::kTransformersVersion, in .pyenv; no torch):
// - tiny Llama / Qwen3 / GPT-2 / Mixtral / Qwen3-MoE models whose config.json is written by
//   transformers' own config classes (save_pretrained: rope_parameters, dtype, Qwen3-MoE's
//   num_local_experts) and, beside them, the same models in the Hub's older spelling (rope_theta,
//   rope_scaling, torch_dtype, num_experts) import to the same checkpoint, with the settings
//   transformers reads from the file, and give the logits of the numpy reference (tests/hf/hf_reference.py);
// - Strata's exports (every family, Llama 3 scaling, YaRN) are in that transformers version's
//   spelling and load with it
//   (tests/hf/hf_transformers_config.py check: known keys, saved back unchanged, the family's tensors);
// - NemotronH in both spellings: tests/unit/test_hf_nemotron_h.cpp;
// - config.json's NaN / Infinity / -Infinity are read as Python's json.loads and transformers read them.
// A .pyenv without transformers fails these tests (never a silent skip).
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/formats/safetensors.h"
#include "hf_test_helpers.h"
#include "training/hf/hf_export.h"
#include "training/hf/hf_json_read.h"
#include "training/inference/generation.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const char* kFamilies[] = {"llama", "qwen3", "gpt2", "mixtral", "qwen3_moe"};

// Strata's model section against what transformers reads from the same config.json
// (hf_transformers_config.py `reading`).
void check_reading(const nlohmann::json& rd, const ResolvedConfig& c) {
  INFO("transformers reads " << rd.dump());
  const ResolvedModelConfig& m = c.model;
  CHECK(rd.at("vocab_size") == *c.model->vocab_size);
  CHECK(rd.at("tie_word_embeddings") == !m->untie_embeddings_and_output_weights);
  CHECK(rd.at("hidden_size") == m->hidden_size);
  CHECK(rd.at("layers") == m->num_layers);
  CHECK(rd.at("heads") == m->num_attention_heads);
  CHECK(rd.at("max_positions") == m.max_positions());
  CHECK(rd.at("eps").get<double>() == m->layernorm_epsilon);
  const bool moe = rd.contains("experts");
  CHECK(rd.at("ffn") == (rd.at("model_type") == "mixtral" ? m.moe_ffn() : m.ffn()));
  if (rd.at("model_type") == "gpt2") {
    CHECK(rd.at("activation") == (m->openai_gelu ? "gelu_new" : "gelu"));
    return;
  }
  CHECK(rd.at("kv_heads") == m.query_groups());
  CHECK(rd.at("head_dim") == m.head_dim());
  CHECK(rd.at("rope_theta").get<double>() == static_cast<double>(m->rotary_base));
  CHECK((rd.at("rope_type") == "llama3") == m->use_rope_scaling);
  if (m->use_rope_scaling) CHECK(rd.at("rope_factor").get<double>() == m->rope_scaling_factor);
  CHECK((rd.at("rope_type") == "yarn") == (m->position_embedding_type == PositionEmbeddingType::Yarn));
  if (rd.at("rope_type") == "yarn") {
    const nlohmann::json& y = rd.at("yarn");
    CHECK(rd.at("rope_factor").get<double>() == m->rotary_scaling_factor);
    CHECK(y.at("original_max_position_embeddings") == m->yarn_original_max_position_embeddings);
    CHECK(y.at("beta_fast").get<double>() == m->yarn_beta_fast);
    CHECK(y.at("beta_slow").get<double>() == m->yarn_beta_slow);
    CHECK(y.at("truncate") == m->yarn_correction_range_round_to_int);
    CHECK(y.at("mscale").get<double>() == m->mscale);
    CHECK(y.at("mscale_all_dim").get<double>() == m->mscale_all_dim);
  }
  CHECK(moe == m->num_experts.has_value());
  if (!moe) return;
  CHECK(rd.at("experts") == *m->num_experts);
  CHECK(rd.at("topk") == m->moe_router_topk);
  CHECK(rd.at("renormalise") == !m->moe_router_pre_softmax);
  if (rd.at("model_type") != "qwen3_moe") return;
  CHECK(rd.at("moe_ffn") == m.moe_ffn());
  std::vector<int64_t> moe_layers;
  for (int64_t i = 0; i < m->num_layers; ++i)
    if (m.is_moe_layer(i)) moe_layers.push_back(i);
  CHECK(rd.at("moe_layers").get<std::vector<int64_t>>() == moe_layers);
}

std::map<std::string, Tensor> checkpoint_tensors_of(const fs::path& save) {
  return formats::read_safetensors((save / "iter_0000000" / "model_rank_0000.safetensors").string()).tensors;
}

}  // namespace

TEST_CASE("hf transformers 5: the pinned transformers is the version exports are written for", "[hf]") {
  const fs::path dir = fresh_dir("tf5_version");
  const nlohmann::json r = transformers_config("make llama " + (dir / "hf").string());
  CHECK(r.at("transformers_version") == hf::kTransformersVersion);  // scripts/setup.sh and hf_format.h agree
  fs::remove_all(dir);
}

TEST_CASE("hf transformers 5: models saved by transformers, and the Hub's older spelling, import as transformers "
          "reads them", "[hf]") {
  REQUIRE(numpy_available());
  for (const char* family : kFamilies) {
    DYNAMIC_SECTION(family) {
      const fs::path dir = fresh_dir(std::string("tf5_import_") + family);
      const nlohmann::json now = transformers_config("make " + std::string(family) + " " + (dir / "v5").string());
      const nlohmann::json old =
          transformers_config("make " + std::string(family) + " " + (dir / "old").string() + " --old-spelling");
      CHECK(now.at("reading") == old.at("reading"));  // one model in two spellings
      const nlohmann::json v5_config = read_json(dir / "v5" / "config.json");
      CHECK(v5_config.contains("rope_parameters") == (std::string(family) != "gpt2"));
      CHECK_FALSE(v5_config.contains("rope_theta"));

      const hf::ImportResult a = hf::import_checkpoint((dir / "v5").string(), (dir / "a").string());
      const hf::ImportResult b = hf::import_checkpoint((dir / "old").string(), (dir / "b").string());
      check_reading(now.at("reading"), a.config);
      check_reading(old.at("reading"), b.config);
      CHECK(a.config.to_yaml() == b.config.to_yaml());
      const auto ta = checkpoint_tensors_of(dir / "a"), tb = checkpoint_tensors_of(dir / "b");
      REQUIRE(ta.size() == tb.size());
      for (const auto& [name, t] : ta) CHECK(test::max_abs_diff(t, tb.at(name)) == 0.0);

      // The imported model computes what the numpy implementation of transformers' forward does.
      const std::vector<int64_t> ids = {1, 5, 9, 33, 2, 95, 0, 60};
      const auto ref = script_logits("hf_reference.py", dir / "v5", ids);
      REQUIRE(ref.has_value());
      generation::LoadedModel lm = generation::load_for_inference((dir / "a").string(), {"training.device=cpu"});
      const Tensor ours =
          lm.model->logits_for(Tensor::from_data(ids, Shape{1, static_cast<int64_t>(ids.size())}), nullptr, 0);
      double max_abs = 0;
      const double d = max_logit_diff(*ref, ours.to_vector(), 96, &max_abs);
      INFO("max |ours - numpy reference| = " << d << ", max |logit| = " << max_abs);
      CHECK(max_abs > 0.5);
      CHECK(d < 1e-4);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf transformers 5: exports are written in the pinned transformers' spelling and load with it", "[hf]") {
  const std::pair<hf::Family, const char*> cases[] = {{hf::Family::Llama, "llama"},     {hf::Family::Llama, "llama3"},
                                                      {hf::Family::Qwen3, "qwen3"},     {hf::Family::GPT2, "gpt2"},
                                                      {hf::Family::Qwen3, "qwen3_yarn"},
                                                      {hf::Family::Mixtral, "mixtral"}, {hf::Family::Qwen3Moe, "qwen3_moe"}};
  for (const auto& [family, name] : cases) {
    DYNAMIC_SECTION(name) {
      const fs::path dir = fresh_dir(std::string("tf5_export_") + name);
      StrataConfig cfg = family_config(family, false, Precision::Bf16);
      if (std::string(name) == "llama3") {
        cfg.model.rotary_base = 500000;
        cfg.model.use_rope_scaling = true;
        cfg.model.rope_scaling_factor = 8.0;
      }
      if (std::string(name) == "qwen3_yarn") {  // an mscale pair, so that every YaRN key is written
        cfg.model.position_embedding_type = PositionEmbeddingType::Yarn;
        cfg.model.rotary_scaling_factor = 4.0;
        cfg.model.yarn_original_max_position_embeddings = 4;
        cfg.model.yarn_beta_fast = 16.0;
        cfg.model.yarn_correction_range_round_to_int = false;
        cfg.model.mscale = 0.9;
        cfg.model.mscale_all_dim = 0.4;
      }
      save_random_checkpoint(cfg, dir / "ckpt", 3);
      hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
      const nlohmann::json j = read_json(dir / "hf" / "config.json");
      CHECK(j.at("transformers_version") == hf::kTransformersVersion);
      CHECK(j.at("dtype") == "bfloat16");
      const nlohmann::json r = transformers_config("check " + (dir / "hf").string());
      check_reading(r.at("reading"), cfg.validate(1));
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf config.json: NaN, Infinity and -Infinity as Python's json and transformers 5 write them", "[hf]") {
  using hf::detail::parse_config_json;
  const nlohmann::json j = parse_config_json(
      R"({"a": [0.0, Infinity, -Infinity, NaN], "s": "NaN Infinity \" -Infinity", "t": {"__float__": "-Infinity"},
          "u": [{"__float__": "NaN"}, {"__float__": "Infinity"}], "v": {"__float__": "other"}, "w": -1.5})",
      "config.json");
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(j.at("a")[0] == 0.0);
  CHECK(j.at("a")[1].get<double>() == inf);
  CHECK(j.at("a")[2].get<double>() == -inf);
  CHECK(std::isnan(j.at("a")[3].get<double>()));
  CHECK(j.at("s") == "NaN Infinity \" -Infinity");  // strings are left as they are
  CHECK(j.at("t").get<double>() == -inf);
  CHECK(std::isnan(j.at("u")[0].get<double>()));
  CHECK(j.at("u")[1].get<double>() == inf);
  CHECK(j.at("v") == nlohmann::json{{"__float__", "other"}});  // an unknown tag stays, as in transformers
  CHECK(j.at("w") == -1.5);
  CHECK_THROWS_WITH(parse_config_json("{\"a\": Inf}", "dir/config.json"),
                    Contains("dir/config.json is not valid JSON"));
  CHECK_THROWS_WITH(parse_config_json("{\"a\": nan}", "dir/config.json"), Contains("dir/config.json"));
}
