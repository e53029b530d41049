// YaRN against transformers (training/hf/hf_format.cpp read_yarn / yarn_rope_json, kernels/rotary.h):
// - Hugging Face configs with rope_type yarn, in both spellings and through the corners of
//   transformers' rules (Qwen3's factor + original context, gpt-oss's truncate false, DeepSeek's
//   mscale pair, an explicit attention_factor, a null factor, a lone mscale, the Hub's rope_scaling
//   with a top-level original_max_position_embeddings, beta_fast 0 and truncate null): the
//   frequencies and the cos/sin factor the rotary kernel applies after `strata import` equal what
//   transformers' _compute_yarn_parameters gives (tests/hf/hf_yarn_parameters.py: its code, on a
//   numpy stand-in for torch, in float32);
// - Strata's yarn configs (Megatron's defaults, an mscale pair, a lone mscale that only
//   attention_factor carries, truncate false): transformers reads the exported config.json into
//   the same numbers, and the export imports back to the same options;
// - what cannot be represented is refused naming the key.
// The numbers are compared to 2e-6 relative (transformers rounds to float32 along the way; the
// YaRN blend moves them by up to the factor, 4 to 40 here) and the factor to 1e-13.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hf_test_helpers.h"
#include "models/layers/rotary_config.h"
#include "rotary_probe.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A tiny LlamaForCausalLM config.json (head_dim 16, max_position_embeddings 16384) with `rope`
// merged in at the top level.
nlohmann::json llama_json(const nlohmann::json& rope) {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
                      {"intermediate_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
                      {"head_dim", 16}, {"num_hidden_layers", 1}, {"vocab_size", 96},
                      {"max_position_embeddings", 16384}};
  j.update(rope);
  return j;
}

// transformers' (inv_freq, attention_factor) of config.json `j`.
nlohmann::json transformers_yarn(const nlohmann::json& j, const std::string& name) {
  const fs::path dir = fresh_dir("yarn_" + name);
  std::ofstream(dir / "config.json") << j.dump(2);
  const nlohmann::json r = pyenv_script_json("hf_yarn_parameters.py", dir.string());
  fs::remove_all(dir);
  CHECK(r.at("transformers_version") == hf::kTransformersVersion);
  return r;
}

// The kernel's frequencies and factor for model section m against transformers' `tf`.
void check_kernel(const ResolvedModelConfig& m, const nlohmann::json& tf) {
  REQUIRE(m->position_embedding_type == PositionEmbeddingType::Yarn);
  const kernels::RotaryOptions opt = layers::attention_rotary_options(m);
  const RotaryProbe p = probe_rotary(m.head_dim(), opt);
  const std::vector<double> want = tf.at("inv_freq").get<std::vector<double>>();
  const double factor = tf.at("attention_factor").get<double>();
  REQUIRE(want.size() == p.inv_freq.size());
  double moved = 0;  // how far YaRN moves the frequencies from plain RoPE's (the test is not vacuous)
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("frequency " << i << ": kernel " << p.inv_freq[i] << ", transformers " << want[i]);
    CHECK(p.inv_freq[i] == Approx(want[i]).epsilon(2e-6));
    const double plain = std::pow(static_cast<double>(m->rotary_base), -2.0 * static_cast<double>(i) /
                                                                            static_cast<double>(m.head_dim()));
    moved = std::max(moved, std::abs(want[i] / plain - 1.0));
  }
  CHECK(moved > 0.4);
  CHECK(opt.mscale == Approx(factor).epsilon(1e-13));
  CHECK(p.mscale == Approx(factor).epsilon(1e-13));
}

}  // namespace

TEST_CASE("hf yarn: transformers' frequencies and attention factor are the kernel's after import", "[hf][yarn]") {
  struct Case {
    const char* name;
    nlohmann::json keys;
  };
  const auto yarn = [](nlohmann::json extra) {
    nlohmann::json r = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}};
    r.update(extra);
    return nlohmann::json{{"rope_parameters", r}};
  };
  const Case cases[] = {
      {"qwen3", yarn({{"rope_theta", 1000000.0}, {"factor", 4.0}, {"original_max_position_embeddings", 4096}})},
      {"gpt_oss", yarn({{"rope_theta", 150000.0}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
                        {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"truncate", false}})},
      {"mscale_pair", yarn({{"factor", 40.0}, {"original_max_position_embeddings", 4096}, {"mscale", 0.707},
                            {"mscale_all_dim", 1.0}, {"beta_fast", 16}, {"beta_slow", 2}})},
      {"attention_factor", yarn({{"factor", 8.0}, {"original_max_position_embeddings", 2048}, {"attention_factor", 1.25},
                                 {"mscale", 0.5}})},
      {"null_factor", yarn({{"factor", nullptr}, {"original_max_position_embeddings", 4096}})},  // 16384 / 4096
      {"lone_mscale", yarn({{"factor", 4.0}, {"original_max_position_embeddings", 4096}, {"mscale", 0.5}})},
      {"no_original", yarn({{"factor", 4.0}})},  // original_max_position_embeddings = max_position_embeddings
      {"beta0_truncate_null",
       yarn({{"factor", 4.0}, {"original_max_position_embeddings", 4096}, {"beta_fast", 0}, {"truncate", nullptr}})},
      {"hub_rope_scaling",  // the older spelling; Phi-3's top-level original_max_position_embeddings wins
       {{"rope_scaling", {{"type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 8192}}},
        {"rope_theta", 500000.0},
        {"original_max_position_embeddings", 1024}}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const nlohmann::json j = llama_json(c.keys);
      const nlohmann::json tf = transformers_yarn(j, c.name);
      const hf::ImportedConfig imported = hf::model_config_from_json(j, "config.json");
      check_kernel(ResolvedModelConfig(imported.model), tf);
    }
  }
}

TEST_CASE("hf yarn: transformers reads Strata's exports into the kernel's numbers, and they import back",
          "[hf][yarn]") {
  struct Case {
    const char* name;
    double factor, mscale, mscale_all_dim;
    int64_t original;
    bool round;
    const char* extra_key;  // a key the export must write ("" none)
  };
  const Case cases[] = {{"megatron_defaults", 4.0, 1.0, 0.0, 4096, true, ""},
                        {"mscale_pair", 40.0, 0.707, 1.0, 4096, true, "mscale_all_dim"},
                        {"lone_mscale", 8.0, 0.5, 0.0, 1024, false, "attention_factor"},
                        {"zero_mscale", 8.0, 0.0, 1.0, 1024, true, "attention_factor"}};
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      StrataConfig cfg = family_config(hf::Family::Llama, false, Precision::Fp32);
      cfg.model.position_embedding_type = PositionEmbeddingType::Yarn;
      cfg.model.kv_channels = 16;
      cfg.model.rotary_base = 20000;
      cfg.model.rotary_scaling_factor = c.factor;
      cfg.model.mscale = c.mscale;
      cfg.model.mscale_all_dim = c.mscale_all_dim;
      cfg.model.yarn_original_max_position_embeddings = c.original;
      cfg.model.yarn_correction_range_round_to_int = c.round;
      const ResolvedConfig resolved = cfg.validate(1);
      const nlohmann::ordered_json out = hf::config_json(resolved.model, hf::Family::Llama, hf::ExportInfo{});
      const nlohmann::json j = nlohmann::json::parse(out.dump());
      const nlohmann::json& rope = j.at("rope_parameters");
      INFO(rope.dump());
      CHECK(rope.at("rope_type") == "yarn");
      CHECK(rope.at("truncate") == c.round);
      CHECK(rope.contains("attention_factor") == (std::string(c.extra_key) == "attention_factor"));
      CHECK(rope.contains("mscale_all_dim") == (std::string(c.extra_key) == "mscale_all_dim"));
      check_kernel(resolved.model, transformers_yarn(j, c.name));
      // Back: the same options (an attention_factor comes back as the mscale that gives it).
      const ResolvedModelConfig back(hf::model_config_from_json(j, "config.json").model);
      const kernels::RotaryOptions a = layers::attention_rotary_options(resolved.model),
                                   b = layers::attention_rotary_options(back);
      CHECK(b.yarn_factor == a.yarn_factor);
      CHECK(b.yarn_original_max_position_embeddings == a.yarn_original_max_position_embeddings);
      CHECK(b.yarn_beta_fast == a.yarn_beta_fast);
      CHECK(b.yarn_beta_slow == a.yarn_beta_slow);
      CHECK(b.yarn_round_to_int == a.yarn_round_to_int);
      CHECK(b.base == a.base);
      CHECK(b.mscale == Approx(a.mscale).epsilon(1e-15));
    }
  }
}

TEST_CASE("hf yarn: what a yarn config.json cannot say to Strata is refused naming the key", "[hf][yarn]") {
  const auto with = [](nlohmann::json extra) {
    nlohmann::json r = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0},
                        {"original_max_position_embeddings", 4096}};
    r.update(extra);
    return llama_json({{"rope_parameters", r}});
  };
  // factor 1: Megatron's concentration factor is 1, whatever mscale says.
  CHECK_THROWS_WITH(hf::model_config_from_json(with({{"factor", 1.0}, {"attention_factor", 1.2}}), "config.json"),
                    Contains("attention_factor 1.2") && Contains("cannot be represented"));
  CHECK_THROWS_WITH(hf::model_config_from_json(with({{"attention_factor", -1.0}}), "config.json"),
                    Contains("attention_factor -1") && Contains("> 0"));
  CHECK_THROWS_WITH(hf::model_config_from_json(with({{"original_max_position_embeddings", 100.5}}), "config.json"),
                    Contains("original_max_position_embeddings 100.5"));
  CHECK_THROWS_WITH(hf::model_config_from_json(with({{"factor", 0.0}}), "config.json"), Contains("factor 0"));
  CHECK_THROWS_WITH(hf::model_config_from_json(with({{"truncate", "yes"}}), "config.json"), Contains("truncate"));
  // An attention_factor of 1 at factor 1 is what Megatron computes: accepted.
  const hf::ImportedConfig one = hf::model_config_from_json(with({{"factor", 1.0}, {"attention_factor", 1.0}}), "c");
  CHECK(one.model.mscale == 1.0);
  CHECK(one.model.mscale_all_dim == 0.0);
}
