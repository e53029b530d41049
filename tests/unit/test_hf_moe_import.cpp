// Tests of `strata import --hf` for the mixture-of-experts families (MixtralForCausalLM,
// Qwen3MoeForCausalLM): Qwen3-MoE's decoder_sparse_step rule becomes moe_layer_freq; a config.json
// without strata's hints (from the Hub) gets the aux loss only with output_router_logits; bad MoE
// keys and a missing expert tensor are errors naming the key or tensor; Mixtral's top-1 and a
// short sliding window are refused. Export and the numerical checks: test_hf_moe.cpp.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/formats/safetensors.h"
#include "hf_test_helpers.h"
#include "training/hf/hf_export.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

TEST_CASE("hf moe import: MoE config.json keys and expert tensors are checked, naming the key or tensor", "[hf]") {
  const fs::path dir = fresh_dir("moe_import");
  StrataConfig cfg = family_config(hf::Family::Qwen3Moe, false, Precision::Fp32);
  save_random_checkpoint(cfg, dir / "ckpt", 7);
  hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
  const fs::path hf_dir = dir / "hf";
  const std::string cfg_backup = file_bytes(hf_dir / "config.json");
  auto restore = [&] { std::ofstream(hf_dir / "config.json") << cfg_backup; };
  auto import_to = [&](const std::string& name) {
    return hf::import_checkpoint(hf_dir.string(), (dir / name).string());
  };

  // Qwen3-MoE's own rule instead of mlp_only_layers: (i + 1) % decoder_sparse_step == 0.
  edit_hf_config(hf_dir, [](auto& j) {
    j["decoder_sparse_step"] = 2;
    j.erase("mlp_only_layers");
  });
  CHECK(import_to("step").config.model.moe_layer_map() == std::vector<int64_t>{0, 1});
  restore();
  // A config.json without strata's hints (a model from the Hub): the aux loss only with
  // output_router_logits, as transformers trains.
  edit_hf_config(hf_dir, [](auto& j) { j.erase("strata"); });
  hf::ImportResult plain = import_to("plain");
  CHECK(plain.config.model->moe_aux_loss_coeff == std::vector<double>{0.0});
  CHECK_FALSE(plain.config.model->moe_z_loss_coeff.has_value());
  edit_hf_config(hf_dir, [](auto& j) {
    j["output_router_logits"] = true;
    j["router_aux_loss_coef"] = 0.02;
  });
  CHECK(import_to("plain_aux").config.model->moe_aux_loss_coeff == std::vector<double>{0.02});
  restore();

  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> bad = {
      {[](auto& j) { j["mlp_only_layers"] = {5}; }, "mlp_only_layers entry 5 is not a layer id in [0, 2)"},
      {[](auto& j) { j["mlp_only_layers"] = {0, 1}; }, "leave no MoE layer"},
      {[](auto& j) { j["shared_expert_intermediate_size"] = 64; }, "shared_expert_intermediate_size 64"},
      {[](auto& j) { j["num_experts_per_tok"] = 5; }, "num_experts_per_tok 5 is not in [1, num_local_experts 4]"},
      {[](auto& j) { j["num_experts_per_tok"] = 1; }, "num_experts_per_tok 1 with norm_topk_prob=true"},
      {[](auto& j) { j.erase("moe_intermediate_size"); }, "config key 'moe_intermediate_size' is missing"},
      {[](auto& j) { j["num_experts"] = 6; }, "num_local_experts 4 and num_experts 6 disagree"},
      {[](auto& j) { j["strata"]["moe"]["moe_token_drop_policy"] = "random"; }, "'moe_token_drop_policy' is 'random'"},
  };
  for (const auto& [edit, message] : bad) {
    DYNAMIC_SECTION(message) {
      edit_hf_config(hf_dir, edit);
      CHECK_THROWS_WITH(import_to("bad"), Contains("config.json") && Contains(message));
      restore();
    }
  }
  // A missing expert tensor names it.
  {
    const std::string path = (hf_dir / "model.safetensors").string();
    std::map<std::string, Tensor> t;
    for (auto& [n, v] : formats::read_safetensors(path).tensors) t[n] = v.clone();
    t.erase("model.layers.1.mlp.experts.3.down_proj.weight");
    formats::write_safetensors(path, t, {{"format", "pt"}});
    CHECK_THROWS_WITH(import_to("missing"), Contains("tensor 'model.layers.1.mlp.experts.3.down_proj.weight' is missing"));
  }
  fs::remove_all(dir);
}

TEST_CASE("hf moe import: Mixtral's top-1 and a short sliding window are refused", "[hf]") {
  const fs::path dir = fresh_dir("moe_import_mixtral");
  StrataConfig cfg = family_config(hf::Family::Mixtral, false, Precision::Fp32);
  save_random_checkpoint(cfg, dir / "ckpt", 8);
  hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
  const fs::path hf_dir = dir / "hf";
  edit_hf_config(hf_dir, [](auto& j) { j["num_experts_per_tok"] = 1; });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), (dir / "a").string()),
                    Contains("num_experts_per_tok 1 with Mixtral's renormalised"));
  edit_hf_config(hf_dir, [](auto& j) {
    j["num_experts_per_tok"] = 2;
    j["sliding_window"] = 4;
  });
  CHECK_THROWS_WITH(hf::import_checkpoint(hf_dir.string(), (dir / "b").string()),
                    Contains("sliding_window 4 is shorter than max_position_embeddings 16"));
  edit_hf_config(hf_dir, [](auto& j) { j["sliding_window"] = 4096; });  // longer than the context: plain attention
  CHECK_NOTHROW(hf::import_checkpoint(hf_dir.string(), (dir / "c").string()));
  fs::remove_all(dir);
}
