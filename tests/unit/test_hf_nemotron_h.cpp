// NemotronHForCausalLM (training/hf/hf_nemotron_h_format.h, hf_nemotron_h_map.h): Strata's hybrid
// models (model.hybrid_layer_pattern) as transformers' nemotron_h.
// - export → import → export is bit-identical (tensors, config.json, the imported model's logits),
//   f32 untied and bf16 tied;
// - the log-probabilities an independent numpy implementation of transformers' NemotronHForCausalLM
//   (tests/hf/hf_reference.py, float64, the Mamba2 scan as its recurrence) gives an export equal
//   `strata generate --score` within f32 rounding, and Strata's f64 forward of the same weights to 1e-9;
// - directories written by transformers' NemotronHConfig (hf_transformers_config.py make, in both
//   spellings: layers_block_type and the Hub's hybrid_override_pattern with a bare Infinity) import
//   with the reference's logits, the Mamba / attention one and the MLP + latent-MoE one; exports are
//   in the pinned transformers' spelling and hold the tensors it expects (hf_transformers_config.py check);
// - MLP (squared ReLU) and MoE layers (sigmoid router with expert bias and groups, shared expert,
//   latent projections) round-trip and score as the reference does;
// - what transformers computes differently is refused, naming the field or key.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_test_helpers.h"
#include "core/formats/safetensors.h"
#include "hf_test_helpers.h"
#include "training/hf/hf_export.h"
#include "training/inference/generation.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::vector<int64_t>& kIds = kHfTestIds;

// A Mamba/attention hybrid, "M*M*" (or `pattern`): hidden 32, attention 4 heads of 8 in 2 query
// groups without positions, Mamba 4 heads of 16 in 2 groups with state 8 (chunks of 4, so the scan
// crosses chunks), RMSNorm eps 1e-5, no biases, vocabulary 257.
StrataConfig nemotron_config(bool tied, Precision precision, const std::string& pattern = "M*M*") {
  StrataConfig c;
  ModelConfig& m = c.model;
  set_tiny_hf_model(m);
  m.hybrid_layer_pattern = pattern;
  m.num_layers = 4;
  m.group_query_attention = true;
  m.num_query_groups = 2;
  m.kv_channels = 8;
  m.max_position_embeddings = 16;
  m.layernorm_epsilon = 1e-5;
  m.position_embedding_type = PositionEmbeddingType::None;
  m.add_bias_linear = false;
  m.untie_embeddings_and_output_weights = !tied;
  m.ffn_hidden_size = 40;
  m.mamba_num_heads = 4;
  m.mamba_head_dim = 16;
  m.mamba_num_groups = 2;
  m.mamba_state_dim = 8;
  m.mamba_chunk_size = 4;
  c.training.precision = precision;
  c.training.device = "cpu";
  c.optimizer.lr = 1e-3;
  c.data.mock_data = true;
  c.model.vocab_size = 257;
  return c;
}

// With MLP and MoE layers ("M*-E" or `pattern`): squared ReLU, 8 experts of FFN 12 in 4 groups (2
// kept), top-4, routed_scaling_factor 2.5, sigmoid scores with an expert bias, a shared expert of 20
// and (latent) moe_latent_size 16 — Nemotron-3's MoE.
StrataConfig nemotron_moe_config(bool latent, bool tied, Precision precision, const std::string& pattern = "M*-E") {
  StrataConfig c = nemotron_config(tied, precision, pattern);
  ModelConfig& m = c.model;
  m.squared_relu = true;
  m.num_experts = 8;
  m.moe_ffn_hidden_size = 12;
  m.moe_router_topk = 4;
  m.moe_router_num_groups = 4;
  m.moe_router_group_topk = 2;
  m.moe_router_topk_scaling_factor = 2.5;
  m.moe_shared_expert_intermediate_size = 20;
  if (latent) m.moe_latent_size = 16;
  m.moe_router_score_function = MoeScoreFunction::Sigmoid;
  m.moe_router_enable_expert_bias = true;
  m.moe_router_dtype = MoeRouterDtype::Fp32;
  m.moe_router_load_balancing_type = {"seq_aux_loss"};
  m.moe_aux_loss_coeff = {1e-4};
  return c;
}

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t i : ids) s += (s.empty() ? "" : ",") + std::to_string(i);
  return s;
}

std::map<std::string, Tensor> checkpoint_tensors(const fs::path& save, const char* iter) {
  return formats::read_safetensors((save / iter / "model_rank_0000.safetensors").string()).tensors;
}

// Exports a random checkpoint of `cfg`, scores kIds with hf_reference.py and with `strata generate
// --score`; returns max |difference| (and the largest |log-probability| in *spread). Also checks
// that Strata's f64 logits of the same weights equal the reference's to 1e-9.
double reference_score_diff(const StrataConfig& cfg, const fs::path& dir, uint64_t seed, double* spread) {
  auto model = save_random_model(cfg, dir / "ckpt", seed);
  hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
  {
    const auto ref = script_logits("hf_reference.py", dir / "hf", kIds);
    REQUIRE(ref.has_value());
    double max_abs = 0;
    const double d = max_logit_diff(*ref, f64_logits(*model, cfg, kIds), 257, &max_abs);
    INFO("max |Strata f64 - numpy transformers| logit = " << d << ", max |logit| = " << max_abs);
    CHECK(max_abs > 1.0);
    CHECK(d < 1e-9);
  }
  const std::optional<std::string> out =
      run_script("hf_reference.py", "--score " + (dir / "hf").string() + " " + ids_text(kIds));
  REQUIRE(out.has_value());
  const auto ref = nlohmann::json::parse(*out);
  CHECK(ref.at("vocab") == 257);
  const CliResult r = run_cli({"generate", "--load", (dir / "ckpt").string(), "--prompt-ids", ids_text(kIds), "--score"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto ours = nlohmann::json::parse(r.out);
  REQUIRE(ours.at("logprobs").size() == kIds.size());
  double diff = 0;
  *spread = 0;
  for (size_t i = 1; i < kIds.size(); ++i) {
    const double a = ours.at("logprobs")[i].get<double>(), b = ref.at("logprobs")[i].get<double>();
    diff = std::max(diff, std::abs(a - b));
    *spread = std::max(*spread, std::abs(b));
  }
  return diff;
}

// Imports hf_dir and compares the imported model's logits with hf_reference.py's.
hf::ImportResult compare_import(const fs::path& hf_dir, const fs::path& save, double tolerance) {
  const std::vector<int64_t> ids = {1, 5, 9, 33, 2, 95, 0, 60, 17, 3};
  const auto theirs = script_logits("hf_reference.py", hf_dir, ids);
  REQUIRE(theirs.has_value());
  const hf::ImportResult im = hf::import_checkpoint(hf_dir.string(), save.string());
  CHECK(im.family == hf::Family::NemotronH);
  generation::LoadedModel lm = generation::load_for_inference(save.string(), {"training.device=cpu"});
  const Tensor ours =
      lm.model->logits_for(Tensor::from_data(ids, Shape{1, static_cast<int64_t>(ids.size())}), nullptr, 0);
  REQUIRE(ours.size(2) == 96);
  double max_abs = 0;
  const double d = max_logit_diff(*theirs, ours.to_vector(), 96, &max_abs);
  INFO(hf_dir.filename().string() << ": max |ours - reference| = " << d << ", max |logit| = " << max_abs);
  CHECK(max_abs > 0.5);
  CHECK(d < tolerance);
  return im;
}

}  // namespace

TEST_CASE("hf nemotron_h: export → import → export is bit-identical (f32 untied, bf16 tied)", "[hf][hybrid]") {
  for (const bool tied : {false, true}) {
    DYNAMIC_SECTION((tied ? "bf16 tied" : "f32 untied")) {
      const fs::path dir = fresh_dir("nemotron_h_roundtrip");
      const StrataConfig cfg = nemotron_config(tied, tied ? Precision::Bf16 : Precision::Fp32, "M*|M*");
      auto model = save_random_model(cfg, dir / "ckpt", 17);
      const hf::ExportResult ex = hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
      CHECK(ex.family == hf::Family::NemotronH);
      CHECK(ex.notes.empty());
      const auto cj = read_json(dir / "hf" / "config.json");
      CHECK(cj.at("architectures")[0] == "NemotronHForCausalLM");
      CHECK(cj.at("model_type") == "nemotron_h");
      CHECK(cj.at("layers_block_type") ==
            nlohmann::json::array({"linear_attention", "full_attention", "linear_attention", "full_attention"}));
      CHECK(cj.at("strata").at("hybrid_layer_pattern") == "M*|M*");
      CHECK(cj.at("mamba_num_heads") == 4);
      CHECK(cj.at("n_groups") == 2);
      CHECK(cj.at("chunk_size") == 4);
      CHECK(cj.at("expand") == 2);
      CHECK(cj.at("num_key_value_heads") == 2);
      CHECK(cj.at("head_dim") == 8);
      CHECK(cj.at("tie_word_embeddings") == tied);
      CHECK(cj.at("time_step_limit")[1] == nlohmann::json{{"__float__", "Infinity"}});
      CHECK_FALSE(cj.contains("n_routed_experts"));
      const auto t = formats::read_safetensors((dir / "hf" / "model.safetensors").string()).tensors;
      CHECK(t.at("backbone.embeddings.weight").shape() == Shape{257, 32});
      CHECK(t.count("lm_head.weight") == !tied);
      CHECK(t.at("backbone.layers.0.mixer.in_proj.weight").shape() == Shape{2 * 64 + 2 * 2 * 8 + 4, 32});
      CHECK(t.at("backbone.layers.0.mixer.conv1d.weight").shape() == Shape{64 + 32, 1, 4});
      CHECK(t.at("backbone.layers.2.mixer.A_log").dtype() == DType::F32);  // f32 in a bf16 model too
      CHECK(t.at("backbone.layers.2.mixer.dt_bias").dtype() == (tied ? DType::BF16 : DType::F32));
      CHECK(t.at("backbone.layers.1.mixer.k_proj.weight").shape() == Shape{16, 32});
      CHECK(t.at("backbone.layers.3.norm.weight").shape() == Shape{32});
      CHECK(t.count("backbone.norm_f.weight") == 1);
      const hf::ImportResult im = hf::import_checkpoint((dir / "hf").string(), (dir / "imported").string());
      CHECK(im.family == hf::Family::NemotronH);
      CHECK(im.notes.empty());
      CHECK(im.config.training->precision == cfg.training.precision);
      CHECK(*im.config.model->hybrid_layer_pattern == "M*|M*");
      CHECK(im.config.model->position_embedding_type == PositionEmbeddingType::None);
      const auto ta = checkpoint_tensors(dir / "ckpt", "iter_0000007"), tb = checkpoint_tensors(dir / "imported", "iter_0000000");
      REQUIRE(ta.size() == tb.size());
      for (const auto& [name, x] : ta) {
        INFO(name);
        REQUIRE(tb.count(name));
        const bool vocab = name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
        const Tensor xa = vocab ? x.narrow(0, 0, 257).contiguous() : x.contiguous();
        const Tensor xb = vocab ? tb.at(name).narrow(0, 0, 257).contiguous() : tb.at(name).contiguous();
        REQUIRE(xa.shape() == xb.shape());
        REQUIRE(xa.dtype() == xb.dtype());
        CHECK(std::memcmp(xa.data_ptr(), xb.data_ptr(), xa.nbytes()) == 0);
      }
      hf::export_checkpoint((dir / "imported").string(), (dir / "hf2").string());
      CHECK(file_bytes(dir / "hf" / "model.safetensors") == file_bytes(dir / "hf2" / "model.safetensors"));
      CHECK(read_json(dir / "hf" / "config.json") == read_json(dir / "hf2" / "config.json"));
      generation::LoadedModel lm = generation::load_for_inference((dir / "imported").string(), {"training.device=cpu"});
      const Tensor ids = Tensor::from_data(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}, Shape{1, 7});
      CHECK(test::max_abs_diff(lm.model->logits_for(ids, nullptr, 0), model->logits_for(ids, nullptr, 0)) == 0.0);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf nemotron_h reference: transformers' scores of Mamba/attention exports equal strata generate --score",
          "[hf][hybrid]") {
  REQUIRE(numpy_available());
  for (const char* pattern : {"M*M*", "*MM"}) {
    DYNAMIC_SECTION(pattern) {
      const fs::path dir = fresh_dir("nemotron_h_score");
      StrataConfig cfg = nemotron_config(std::string(pattern) == "*MM", Precision::Fp32, pattern);
      cfg.model.mamba_num_groups = std::string(pattern) == "*MM" ? 1 : 2;
      double spread = 0;
      const double diff = reference_score_diff(cfg, dir, 31, &spread);
      INFO("max |--score - numpy transformers| = " << diff << ", max |log-probability| = " << spread);
      CHECK(spread > 1.0);
      CHECK(diff < 3e-5);  // Strata's f32 forward (the f64 one agrees to 1e-9, above)
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf nemotron_h: MLP and latent MoE layers, export → import → export bit-identical", "[hf][hybrid][moe]") {
  for (const bool latent : {true, false}) {
    DYNAMIC_SECTION((latent ? "latent MoE, f32 untied" : "MoE, bf16 tied")) {
      const fs::path dir = fresh_dir("nemotron_h_moe_roundtrip");
      const StrataConfig cfg = nemotron_moe_config(latent, !latent, latent ? Precision::Fp32 : Precision::Bf16);
      auto model = save_random_model(cfg, dir / "ckpt", 23);
      const hf::ExportResult ex = hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
      CHECK(ex.family == hf::Family::NemotronH);
      const auto cj = read_json(dir / "hf" / "config.json");
      CHECK(cj.at("layers_block_type") ==
            nlohmann::json::array({"linear_attention", "full_attention", "mlp", "moe"}));
      CHECK(cj.at("mlp_hidden_act") == "relu2");
      CHECK(cj.at("n_routed_experts") == 8);
      CHECK(cj.at("num_experts_per_tok") == 4);
      CHECK(cj.at("n_group") == 4);
      CHECK(cj.at("topk_group") == 2);
      CHECK(cj.at("routed_scaling_factor") == 2.5);
      CHECK(cj.at("norm_topk_prob") == true);
      CHECK(cj.at("moe_shared_expert_intermediate_size") == 20);
      CHECK(cj.at("moe_latent_size") == (latent ? nlohmann::json(16) : nlohmann::json(nullptr)));
      const auto t = formats::read_safetensors((dir / "hf" / "model.safetensors").string()).tensors;
      CHECK(t.at("backbone.layers.2.mixer.up_proj.weight").shape() == Shape{40, 32});
      CHECK(t.at("backbone.layers.3.mixer.gate.weight").shape() == Shape{8, 32});
      CHECK(t.at("backbone.layers.3.mixer.gate.e_score_correction_bias").dtype() == DType::F32);
      CHECK(t.at("backbone.layers.3.mixer.experts.7.up_proj.weight").shape() == Shape{12, latent ? 16 : 32});
      CHECK(t.at("backbone.layers.3.mixer.experts.0.down_proj.weight").shape() == Shape{latent ? 16 : 32, 12});
      CHECK(t.at("backbone.layers.3.mixer.shared_experts.up_proj.weight").shape() == Shape{20, 32});
      CHECK(t.count("backbone.layers.3.mixer.fc1_latent_proj.weight") == latent);
      if (latent) CHECK(t.at("backbone.layers.3.mixer.fc2_latent_proj.weight").shape() == Shape{32, 16});
      const hf::ImportResult im = hf::import_checkpoint((dir / "hf").string(), (dir / "imported").string());
      CHECK(im.notes.empty());
      CHECK(im.config.model->squared_relu);
      CHECK(im.config.model->moe_latent_size == cfg.model.moe_latent_size);
      CHECK(im.config.model->moe_router_load_balancing_type == cfg.model.moe_router_load_balancing_type);  // "strata"
      const auto ta = checkpoint_tensors(dir / "ckpt", "iter_0000007"), tb = checkpoint_tensors(dir / "imported", "iter_0000000");
      REQUIRE(ta.size() == tb.size());
      for (const auto& [name, x] : ta) {
        INFO(name);
        REQUIRE(tb.count(name));
        const bool vocab = name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
        const Tensor xa = vocab ? x.narrow(0, 0, 257).contiguous() : x.contiguous();
        const Tensor xb = vocab ? tb.at(name).narrow(0, 0, 257).contiguous() : tb.at(name).contiguous();
        REQUIRE(xa.shape() == xb.shape());
        CHECK(std::memcmp(xa.data_ptr(), xb.data_ptr(), xa.nbytes()) == 0);
      }
      hf::export_checkpoint((dir / "imported").string(), (dir / "hf2").string());
      CHECK(file_bytes(dir / "hf" / "model.safetensors") == file_bytes(dir / "hf2" / "model.safetensors"));
      CHECK(read_json(dir / "hf" / "config.json") == read_json(dir / "hf2" / "config.json"));
      generation::LoadedModel lm = generation::load_for_inference((dir / "imported").string(), {"training.device=cpu"});
      const Tensor ids = Tensor::from_data(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}, Shape{1, 7});
      CHECK(test::max_abs_diff(lm.model->logits_for(ids, nullptr, 0), model->logits_for(ids, nullptr, 0)) == 0.0);
      if (!latent) CHECK(transformers_config("check " + (dir / "hf").string()).at("reading").at("topk") == 4);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf nemotron_h reference: transformers' scores of MLP / MoE exports equal strata generate --score",
          "[hf][hybrid][moe]") {
  REQUIRE(numpy_available());
  for (const bool latent : {true, false}) {
    DYNAMIC_SECTION((latent ? "M*-E, latent MoE, 4 groups keep 2, scaled 2.5" : "E-*M, one group, top-2, tied")) {
      const fs::path dir = fresh_dir("nemotron_h_moe_score");
      StrataConfig cfg = nemotron_moe_config(latent, !latent, Precision::Fp32, latent ? "M*-E" : "E-*M");
      if (!latent) {
        cfg.model.moe_router_num_groups = std::nullopt;
        cfg.model.moe_router_group_topk = std::nullopt;
        cfg.model.moe_router_topk = 2;
        cfg.model.moe_router_topk_scaling_factor = std::nullopt;
      }
      double spread = 0;
      const double diff = reference_score_diff(cfg, dir, latent ? 41 : 42, &spread);
      INFO("max |--score - numpy transformers| = " << diff << ", max |log-probability| = " << spread);
      CHECK(spread > 1.0);
      CHECK(diff < 3e-5);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf nemotron_h: NemotronHConfig's MoE directory (mamba, attention, mlp, latent moe) imports with the "
          "reference's logits, in both spellings", "[hf][hybrid][moe]") {
  REQUIRE(numpy_available());
  const fs::path dir = fresh_dir("nemotron_h_make_moe");
  const nlohmann::json now = transformers_config("make nemotron_h " + (dir / "v5").string());
  transformers_config("make nemotron_h " + (dir / "old").string() + " --old-spelling");
  const hf::ImportResult a = compare_import(dir / "v5", dir / "a", 1e-4);
  const hf::ImportResult b = compare_import(dir / "old", dir / "b", 1e-4);
  CHECK(a.config.to_yaml() == b.config.to_yaml());
  const ResolvedModelConfig& m = a.config.model;
  const nlohmann::json& rd = now.at("reading");
  CHECK(*m->hybrid_layer_pattern == "M*-E");
  CHECK(m->squared_relu);
  CHECK(*m->num_experts == rd.at("experts").get<int64_t>());
  CHECK(m->moe_router_topk == rd.at("topk").get<int64_t>());
  CHECK(*m->moe_latent_size == rd.at("latent").get<int64_t>());
  CHECK(*m->moe_shared_expert_intermediate_size == rd.at("shared_ffn").get<int64_t>());
  CHECK(*m->moe_router_num_groups == rd.at("n_group").get<int64_t>());
  CHECK(*m->moe_router_topk_scaling_factor == rd.at("routed_scaling_factor").get<double>());
  CHECK(m->moe_router_enable_expert_bias);
  CHECK(m->moe_router_dtype == std::optional<MoeRouterDtype>(MoeRouterDtype::Fp32));
  fs::remove_all(dir);
}

TEST_CASE("hf nemotron_h: NemotronHConfig's directories import, in both spellings, with the reference's logits",
          "[hf][hybrid]") {
  REQUIRE(numpy_available());
  const fs::path dir = fresh_dir("nemotron_h_make");
  const nlohmann::json now = transformers_config("make nemotron_h_mamba " + (dir / "v5").string());
  transformers_config("make nemotron_h_mamba " + (dir / "old").string() + " --old-spelling");
  const std::string old_text = file_bytes(dir / "old" / "config.json");
  CHECK_THAT(old_text, Contains("\"hybrid_override_pattern\": \"M*M*\"") && Contains("Infinity\n"));
  CHECK_THAT(file_bytes(dir / "v5" / "config.json"), Contains("\"__float__\": \"Infinity\""));
  const hf::ImportResult a = compare_import(dir / "v5", dir / "a", 1e-4);
  const hf::ImportResult b = compare_import(dir / "old", dir / "b", 1e-4);
  CHECK(a.config.to_yaml() == b.config.to_yaml());
  const ResolvedModelConfig& m = a.config.model;
  const nlohmann::json& rd = now.at("reading");
  CHECK(*m->hybrid_layer_pattern == "M*M*");
  CHECK(*m->mamba_num_heads == rd.at("mamba_heads").get<int64_t>());
  CHECK(m->mamba_num_groups == rd.at("n_groups").get<int64_t>());
  CHECK(m->mamba_state_dim == rd.at("state").get<int64_t>());
  CHECK(m->mamba_chunk_size == rd.at("chunk_size").get<int64_t>());
  CHECK(m.query_groups() == rd.at("kv_heads").get<int64_t>());
  CHECK(m.head_dim() == rd.at("head_dim").get<int64_t>());
  CHECK(!m->untie_embeddings_and_output_weights == rd.at("tie_word_embeddings").get<bool>());
  fs::remove_all(dir);
}

TEST_CASE("hf nemotron_h: exports are in the pinned transformers' spelling and hold its tensors", "[hf][hybrid]") {
  const fs::path dir = fresh_dir("nemotron_h_check");
  const StrataConfig cfg = nemotron_config(false, Precision::Bf16);
  save_random_model(cfg, dir / "ckpt", 5);
  hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
  const nlohmann::json rd = transformers_config("check " + (dir / "hf").string()).at("reading");
  INFO(rd.dump());
  CHECK(rd.at("layers_block_type").size() == 4);
  CHECK(rd.at("mamba_heads") == 4);
  CHECK(rd.at("mamba_head_dim") == 16);
  CHECK(rd.at("n_groups") == 2);
  CHECK(rd.at("kv_heads") == 2);
  CHECK(rd.at("eps") == 1e-5);
  CHECK(rd.at("time_step_limit")[1] == "inf");
  fs::remove_all(dir);
}

TEST_CASE("hf nemotron_h: configs NemotronHForCausalLM cannot express are export errors naming the field",
          "[hf][hybrid]") {
  const auto finalized = [](const std::function<void(ModelConfig&)>& edit) {
    StrataConfig c = nemotron_config(false, Precision::Fp32);
    edit(c.model);
    return ResolvedModelConfig(c.model);
  };
  CHECK(hf::family_for(finalized([](ModelConfig&) {})) == hf::Family::NemotronH);
  const std::vector<std::pair<std::function<void(ModelConfig&)>, std::string>> refused = {
      {[](ModelConfig& m) { m.layernorm_epsilon = 1e-6; }, "model.layernorm_epsilon=1e-06"},
      {[](ModelConfig& m) { m.position_embedding_type = PositionEmbeddingType::Rope; },
       "model.position_embedding_type=rope"},
      {[](ModelConfig& m) { m.normalization = Normalization::LayerNorm; }, "model.normalization=LayerNorm"},
      {[](ModelConfig& m) { m.add_bias_linear = true; }, "model.add_bias_linear=true"},
      {[](ModelConfig& m) { m.qk_layernorm = true; }, "model.qk_layernorm=true"},
      {[](ModelConfig& m) { m.apply_layernorm_1p = true; }, "model.apply_layernorm_1p=true"},
      {[](ModelConfig& m) { m.hybrid_layer_pattern = "M*-"; }, "model.squared_relu=false"},
      {[](ModelConfig& m) {
         m.hybrid_layer_pattern = "M*-";
         m.swiglu = true;
       },
       "model.swiglu=true"},
  };
  for (const auto& [edit, message] : refused) {
    DYNAMIC_SECTION(message) {
      CHECK_THROWS_WITH(hf::family_for(finalized(edit)), Contains("not NemotronHForCausalLM") && Contains(message));
    }
  }
  const std::vector<std::pair<std::function<void(ModelConfig&)>, std::string>> moe_refused = {
      {[](ModelConfig& m) {  // 8 experts in 2 groups, 1 kept: 4 // 1 = 4 top experts summed per group
         m.moe_router_num_groups = 2;
         m.moe_router_group_topk = 1;
       },
       "model.moe_router_group_topk=1"},
      {[](ModelConfig& m) { m.moe_shared_expert_intermediate_size = std::nullopt; },
       "model.moe_shared_expert_intermediate_size is not set"},
      {[](ModelConfig& m) { m.moe_shared_expert_gate = true; }, "model.moe_shared_expert_gate=true"},
      {[](ModelConfig& m) {
         m.moe_router_score_function = MoeScoreFunction::Softmax;
         m.moe_router_enable_expert_bias = false;
       },
       "model.moe_router_score_function=softmax"},
  };
  for (const auto& [edit, message] : moe_refused) {
    DYNAMIC_SECTION(message) {
      StrataConfig c = nemotron_moe_config(true, false, Precision::Fp32);
      edit(c.model);
      CHECK_THROWS_WITH(hf::family_for(ResolvedModelConfig(c.model)),
                        Contains("not NemotronHForCausalLM") && Contains(message));
    }
  }
  // A GPT family never takes a hybrid model.
  CHECK_THAT(*hf::incompatibility(finalized([](ModelConfig&) {}), hf::Family::Llama),
             Contains("model.hybrid_layer_pattern is set"));
  // Without Mamba layers the epsilon is free (only the Mamba gated norm fixes it).
  CHECK(hf::family_for(finalized([](ModelConfig& m) {
          m.hybrid_layer_pattern = "**";
          m.layernorm_epsilon = 1e-6;
        })) == hf::Family::NemotronH);
}

TEST_CASE("hf nemotron_h import: what transformers computes and Strata cannot is an error naming the key",
          "[hf][hybrid]") {
  const fs::path dir = fresh_dir("nemotron_h_refuse");
  transformers_config("make nemotron_h_mamba " + (dir / "hf").string());
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> refused = {
      {[](nlohmann::json& j) { j["layer_norm_epsilon"] = 1e-6; }, "layer_norm_epsilon 1e-06 is not supported"},
      {[](nlohmann::json& j) { j["conv_kernel"] = 3; }, "conv_kernel 3 is not supported"},
      {[](nlohmann::json& j) { j["use_conv_bias"] = false; }, "use_conv_bias=false"},
      {[](nlohmann::json& j) { j["use_bias"] = true; }, "use_bias=true"},
      {[](nlohmann::json& j) { j["mamba_hidden_act"] = "gelu"; }, "mamba_hidden_act 'gelu'"},
      {[](nlohmann::json& j) { j["time_step_limit"] = {0.0, 2.0}; }, "time_step_limit [0.0,2.0]"},
      {[](nlohmann::json& j) { j["layers_block_type"][1] = "indexed_attention"; }, "'indexed_attention'"},
      {[](nlohmann::json& j) {
         j.erase("head_dim");
         j["attention_head_dim"] = 8;
       },
       "attention_head_dim 8 differs from the head_dim transformers uses (128"},
      {[](nlohmann::json& j) {
         j.erase("layers_block_type");
         j["hybrid_override_pattern"] = "M*G";
       },
       "has 'G'"},
  };
  const nlohmann::json original = read_json(dir / "hf" / "config.json");
  for (const auto& [edit, message] : refused) {
    DYNAMIC_SECTION(message) {
      edit_hf_config(dir / "hf", [&](nlohmann::json& j) {
        j = original;
        edit(j);
      });
      CHECK_THROWS_WITH(hf::import_checkpoint((dir / "hf").string(), (dir / "out").string()),
                        Contains((dir / "hf" / "config.json").string()) && Contains(message));
      CHECK_FALSE(fs::exists(dir / "out"));
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("hf nemotron_h import: transformers 5's names (model., fused experts) and MTP tensors left out",
          "[hf][hybrid]") {
  const fs::path dir = fresh_dir("nemotron_h_names");
  transformers_config("make nemotron_h_mamba " + (dir / "hub").string());
  const auto hub = formats::read_safetensors((dir / "hub" / "model.safetensors").string()).tensors;
  std::map<std::string, Tensor> renamed;
  for (const auto& [name, t] : hub) renamed["model." + name.substr(std::string("backbone.").size())] = t;
  renamed["mtp.layers.0.norm.weight"] = hub.at("backbone.norm_f.weight");
  fs::create_directories(dir / "v5");
  fs::copy_file(dir / "hub" / "config.json", dir / "v5" / "config.json");
  formats::write_safetensors((dir / "v5" / "model.safetensors").string(), renamed, {{"format", "pt"}});
  const hf::ImportResult a = hf::import_checkpoint((dir / "hub").string(), (dir / "a").string());
  const hf::ImportResult b = hf::import_checkpoint((dir / "v5").string(), (dir / "b").string());
  CHECK(a.notes.empty());
  REQUIRE(b.notes.size() == 1);
  CHECK_THAT(b.notes[0], Contains("1 multi-token-prediction tensors (mtp.*) are left out"));
  const auto ta = checkpoint_tensors(dir / "a", "iter_0000000"), tb = checkpoint_tensors(dir / "b", "iter_0000000");
  REQUIRE(ta.size() == tb.size());
  for (const auto& [name, x] : ta) CHECK(test::max_abs_diff(x, tb.at(name)) == 0.0);
  // A tensor twice (under both prefixes) is refused.
  renamed["backbone.norm_f.weight"] = hub.at("backbone.norm_f.weight");
  formats::write_safetensors((dir / "v5" / "model.safetensors").string(), renamed, {{"format", "pt"}});
  CHECK_THROWS_WITH(hf::import_checkpoint((dir / "v5").string(), (dir / "c").string()),
                    Contains("appears twice") && Contains("norm_f.weight"));
  fs::remove_all(dir);
}
