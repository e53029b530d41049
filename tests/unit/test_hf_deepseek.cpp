// DeepseekV3ForCausalLM (training/hf/hf_deepseek_format.h, hf_deepseek_map.h), both variants:
// q_lora_rank set (q_a_proj / q_b_proj) and null (q_proj, DeepSeek-V2-Lite's), YaRN, a dense layer
// then MoE layers (sigmoid router with expert bias, groups, shared experts, routed_scaling_factor):
// - export → import → export is bit-identical (tensors, MTP layers included, config.json, the
//   imported model's logits);
// - the log-probabilities an independent numpy implementation of transformers' DeepseekV3ForCausalLM
//   (tests/hf/hf_reference.py, float64) gives an export equal `strata generate --score` within 1e-5
//   (and transformers' own where torch + transformers are importable: hf_transformers_logits.py);
// - directories written by transformers' DeepseekV3Config (hf_transformers_config.py make, in both
//   spellings: rope_parameters and DeepSeek's rope_scaling {"type": "yarn"}) import with the
//   reference's logits, their MTP layer included; exports are in the pinned transformers' spelling
//   and hold the tensors it expects (hf_transformers_config.py check);
// - models written by transformers' save_pretrained (hf_transformers_logits.py --make-random, when
//   torch is there) import with transformers' logits;
// - what transformers computes differently is refused, naming the field or key.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_helpers.h"
#include "core/formats/safetensors.h"
#include "hf_test_helpers.h"
#include "kernels/rotary.h"
#include "training/hf/hf_deepseek_format.h"
#include "training/hf/hf_export.h"
#include "training/inference/generation.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::vector<int64_t>& kIds = kHfTestIds;

// DeepSeek-V3-like (`lite` false): q_lora_rank 12, YaRN factor 4 with mscale 0.9 / mscale_all_dim
// 0.7, layer 0 dense and 1-2 MoE: 8 experts in 4 groups (2 kept), top-4, 2 shared experts (24),
// routed_scaling_factor 2.5, untied. V2-Lite-like (`lite`): q_lora_rank null, 4 experts, top-2, no
// groups, one shared expert, tied, YaRN factor 16 with mscale = mscale_all_dim = 1 (DeepSeek-V3's).
StrataConfig deepseek_config(bool lite, Precision precision) {
  StrataConfig c;
  ModelConfig& m = c.model;
  set_tiny_hf_model(m);
  m.num_layers = 3;
  m.max_position_embeddings = 64;
  m.layernorm_epsilon = 1e-6;
  m.swiglu = true;
  m.add_bias_linear = false;
  m.untie_embeddings_and_output_weights = !lite;
  m.ffn_hidden_size = 40;
  m.multi_latent_attention = true;
  if (!lite) m.q_lora_rank = 12;
  m.kv_lora_rank = 8;
  m.qk_head_dim = 6;
  m.qk_pos_emb_head_dim = 4;
  m.v_head_dim = 5;
  m.qk_layernorm = true;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.rotary_base = 10000;
  m.rope_type = RopeType::Yarn;
  m.rotary_scaling_factor = lite ? 16.0 : 4.0;
  m.yarn_original_max_position_embeddings = lite ? 4 : 16;
  m.mscale = lite ? 1.0 : 0.9;
  m.mscale_all_dim = lite ? 1.0 : 0.7;
  m.num_experts = lite ? 4 : 8;
  m.moe_ffn_hidden_size = 12;
  m.moe_router_topk = lite ? 2 : 4;
  if (!lite) {
    m.moe_router_num_groups = 4;
    m.moe_router_group_topk = 2;
    m.moe_router_topk_scaling_factor = 2.5;
  }
  m.moe_shared_expert_intermediate_size = lite ? 12 : 24;
  m.moe_layer_freq = {"0", "1", "1"};
  m.moe_router_score_function = MoeScoreFunction::Sigmoid;
  m.moe_router_enable_expert_bias = true;
  m.moe_router_load_balancing_type = {"seq_aux_loss"};
  m.moe_aux_loss_coeff = {1e-4};
  c.training.precision = precision;
  c.training.device = "cpu";
  c.optimizer.lr = 1e-3;
  c.data.mock_data = true;
  c.model.vocab_size = 257;
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

// log_softmax of logits [s][V] at the next id, for kIds.
std::vector<double> scores_of(const std::vector<std::vector<double>>& logits) {
  std::vector<double> out;
  for (size_t i = 1; i < kIds.size(); ++i) {
    const std::vector<double>& row = logits.at(i - 1);
    const double mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (double v : row) sum += std::exp(v - mx);
    out.push_back(row.at(static_cast<size_t>(kIds[i])) - mx - std::log(sum));
  }
  return out;
}

// Imports hf_dir and compares the imported model's logits for `ids` with tests/hf/<script>'s.
// nullopt when the script is unavailable (exit 77).
std::optional<hf::ImportResult> compare_import(const char* script, const fs::path& hf_dir, const fs::path& save,
                                               double tolerance) {
  const std::vector<int64_t> ids = {1, 5, 9, 33, 2, 95, 0, 60, 17, 3};
  const auto theirs = script_logits(script, hf_dir, ids);
  if (!theirs) return std::nullopt;
  const hf::ImportResult im = hf::import_checkpoint(hf_dir.string(), save.string());
  CHECK(im.family == hf::Family::DeepseekV3);
  generation::LoadedModel lm = generation::load_for_inference(save.string(), {"training.device=cpu"});
  const Tensor ours =
      lm.model->logits_for(Tensor::from_data(ids, Shape{1, static_cast<int64_t>(ids.size())}), nullptr, 0);
  REQUIRE(ours.size(2) == 96);
  double max_abs = 0;
  const double d = max_logit_diff(*theirs, ours.to_vector(), 96, &max_abs);
  INFO(hf_dir.filename().string() << ": max |ours - " << script << "| = " << d << ", max |logit| = " << max_abs);
  CHECK(max_abs > 0.5);
  CHECK(d < tolerance);
  return im;
}

}  // namespace

TEST_CASE("hf deepseek: export → import → export is bit-identical (q_lora with MTP f32 untied, q_proj bf16 tied)",
          "[hf][mla]") {
  for (const bool lite : {false, true}) {
    DYNAMIC_SECTION((lite ? "q_proj bf16 tied" : "q_lora f32 untied, one MTP layer")) {
      const fs::path dir = fresh_dir("deepseek_roundtrip");
      StrataConfig cfg = deepseek_config(lite, lite ? Precision::Bf16 : Precision::Fp32);
      if (!lite) cfg.model.mtp_num_layers = 1;
      auto model = save_random_checkpoint(cfg, dir / "ckpt", 17);
      const hf::ExportResult ex = hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
      CHECK(ex.family == hf::Family::DeepseekV3);
      const auto cj = read_json(dir / "hf" / "config.json");
      CHECK(cj.at("architectures")[0] == "DeepseekV3ForCausalLM");
      CHECK(cj.at("q_lora_rank") == (lite ? nlohmann::json(nullptr) : nlohmann::json(12)));
      CHECK(cj.at("first_k_dense_replace") == 1);
      CHECK(cj.at("n_shared_experts") == 2 - lite);
      CHECK(cj.at("n_group") == (lite ? 1 : 4));
      CHECK(cj.at("norm_topk_prob") == true);
      CHECK(cj.at("routed_scaling_factor") == (lite ? 1.0 : 2.5));
      CHECK(cj.at("num_nextn_predict_layers") == (lite ? 0 : 1));
      CHECK(cj.at("rope_parameters").at("rope_type") == "yarn");
      CHECK(cj.at("rope_parameters").at("mscale_all_dim") == (lite ? 1.0 : 0.7));
      CHECK_FALSE(cj.at("rope_parameters").contains("attention_factor"));  // transformers' rule gives ours
      const auto t = formats::read_safetensors((dir / "hf" / "model.safetensors").string()).tensors;
      CHECK(t.count(lite ? "model.layers.0.self_attn.q_proj.weight" : "model.layers.0.self_attn.q_b_proj.weight"));
      CHECK(t.at("model.layers.0.mlp.gate_proj.weight").shape() == Shape{40, 32});
      CHECK(t.at("model.layers.2.mlp.gate.e_score_correction_bias").dtype() == DType::F32);
      CHECK(t.at("model.layers.1.mlp.shared_experts.up_proj.weight").shape() == Shape{lite ? 12 : 24, 32});
      CHECK(t.at("model.layers.1.self_attn.kv_b_proj.weight").shape() == Shape{4 * (6 + 5), 8});
      CHECK(t.count("model.layers.3.eh_proj.weight") == !lite);
      if (!lite) {
        CHECK(t.at("model.layers.3.eh_proj.weight").shape() == Shape{32, 64});
        CHECK(t.at("model.layers.3.mlp.experts.7.down_proj.weight").shape() == Shape{32, 12});
        CHECK(test::max_abs_diff(t.at("model.layers.3.shared_head.head.weight"), t.at("lm_head.weight")) == 0.0);
        CHECK(test::max_abs_diff(t.at("model.layers.3.embed_tokens.weight"), t.at("model.embed_tokens.weight")) == 0.0);
      }
      const hf::ImportResult im = hf::import_checkpoint((dir / "hf").string(), (dir / "imported").string());
      CHECK(im.family == hf::Family::DeepseekV3);
      CHECK(im.notes.empty());
      CHECK(im.config.training->precision == cfg.training.precision);
      CHECK(im.config.model->mtp_depths() == (lite ? 0 : 1));
      CHECK(im.config.model->moe_router_dtype == model->config()->moe_router_dtype);  // from "strata"
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
      const Tensor ids = Tensor::from_data(std::vector<int64_t>{1, 2, 3, 4, 5}, Shape{1, 5});
      CHECK(test::max_abs_diff(lm.model->logits_for(ids, nullptr, 0), model->logits_for(ids, nullptr, 0)) == 0.0);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf deepseek reference: transformers' scores of DeepseekV3 exports equal strata generate --score",
          "[hf][mla]") {
  REQUIRE(numpy_available());
  for (const bool lite : {false, true}) {
    DYNAMIC_SECTION((lite ? "q_proj, one group, top-2, tied" : "q_lora, 4 groups keep 2, top-4, scaled 2.5, MTP")) {
      const fs::path dir = fresh_dir("deepseek_score");
      StrataConfig cfg = deepseek_config(lite, Precision::Fp32);
      if (!lite) cfg.model.mtp_num_layers = 1;  // written as model.layers.3: transformers loads the rest
      save_random_checkpoint(cfg, dir / "ckpt", lite ? 51 : 52);
      hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
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
      double diff = 0, spread = 0;
      for (size_t i = 1; i < kIds.size(); ++i) {
        const double a = ours.at("logprobs")[i].get<double>(), b = ref.at("logprobs")[i].get<double>();
        diff = std::max(diff, std::abs(a - b));
        spread = std::max(spread, std::abs(b));
      }
      INFO("max |--score - numpy transformers| = " << diff << ", max |log-probability| = " << spread);
      CHECK(spread > 1.0);
      CHECK(diff < 1e-5);
      if (const auto tf = script_logits("hf_transformers_logits.py", dir / "hf", kIds)) {  // not in CI
        const std::vector<double> tfs = scores_of(*tf);
        double d = 0;
        for (size_t i = 1; i < kIds.size(); ++i) d = std::max(d, std::abs(tfs[i - 1] - ours.at("logprobs")[i].get<double>()));
        INFO("max |--score - transformers (installed)| = " << d);
        CHECK(d < 1e-5);
      }
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf deepseek: DeepseekV3Config's directories import, in both spellings, with the reference's logits",
          "[hf][mla]") {
  REQUIRE(numpy_available());
  for (const char* family : {"deepseek_v3", "deepseek_v3_qproj"}) {
    DYNAMIC_SECTION(family) {
      const fs::path dir = fresh_dir(std::string("deepseek_make_") + family);
      const nlohmann::json now = transformers_config("make " + std::string(family) + " " + (dir / "v5").string());
      transformers_config("make " + std::string(family) + " " + (dir / "old").string() + " --old-spelling");
      CHECK(read_json(dir / "old" / "config.json").at("rope_scaling").at("type") == "yarn");
      const std::optional<hf::ImportResult> a = compare_import("hf_reference.py", dir / "v5", dir / "a", 1e-4);
      REQUIRE(a.has_value());
      const hf::ImportResult b = hf::import_checkpoint((dir / "old").string(), (dir / "b").string());
      CHECK(a->config.to_yaml() == b.config.to_yaml());
      const ResolvedModelConfig& m = a->config.model;
      const nlohmann::json& rd = now.at("reading");
      CHECK(m->multi_latent_attention);
      CHECK(m->q_lora_rank == (rd.at("q_lora_rank").is_null() ? std::nullopt : std::optional<int64_t>(12)));
      CHECK(m->rope_type == RopeType::Yarn);
      CHECK(m->rotary_scaling_factor == rd.at("rope").at("factor").get<double>());
      CHECK(m->mscale_all_dim == rd.at("rope").at("mscale_all_dim").get<double>());
      CHECK(*m->num_experts == rd.at("experts").get<int64_t>());
      CHECK(*m->moe_shared_expert_intermediate_size == rd.at("shared_experts").get<int64_t>() * 12);
      CHECK(m->moe_router_dtype == std::optional<MoeRouterDtype>(MoeRouterDtype::Fp32));
      CHECK(m->mtp_depths() == rd.at("mtp_layers").get<int64_t>());  // the file holds the MTP layer
      // Strata's MLA softmax scale is transformers' DeepseekV3Attention.scaling.
      const double scale = std::pow(kernels::yarn_get_mscale(m->rotary_scaling_factor, m->mscale_all_dim), 2) /
                           std::sqrt(static_cast<double>(m->qk_head_dim + m->qk_pos_emb_head_dim));
      CHECK(std::abs(scale - rd.at("softmax_scale").get<double>()) < 1e-15);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf deepseek: exports are in the pinned transformers' spelling and hold its tensors", "[hf][mla]") {
  for (const bool lite : {false, true}) {
    DYNAMIC_SECTION((lite ? "q_proj" : "q_lora with MTP")) {
      const fs::path dir = fresh_dir("deepseek_check");
      StrataConfig cfg = deepseek_config(lite, Precision::Bf16);
      if (!lite) cfg.model.mtp_num_layers = 1;
      save_random_checkpoint(cfg, dir / "ckpt", 5);
      hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
      const nlohmann::json rd = transformers_config("check " + (dir / "hf").string()).at("reading");
      INFO(rd.dump());
      const ResolvedConfig c = cfg.validate(1);
      CHECK(rd.at("layers") == 3);
      CHECK(rd.at("kv_lora_rank") == 8);
      CHECK(rd.at("moe_layers") == nlohmann::json::array({1, 2}));
      CHECK(rd.at("mtp_layers") == (lite ? 0 : 1));
      CHECK(rd.at("topk_group") == (lite ? 1 : 2));
      const double scale = std::pow(kernels::yarn_get_mscale(c.model->rotary_scaling_factor, c.model->mscale_all_dim), 2) /
                           std::sqrt(10.0);
      CHECK(std::abs(scale - rd.at("softmax_scale").get<double>()) < 1e-15);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf deepseek: models written by transformers' save_pretrained import with its logits (when installed)",
          "[hf][mla]") {
  for (const char* family : {"deepseek_v3", "deepseek_v3_qproj"}) {
    DYNAMIC_SECTION(family) {
      const fs::path dir = fresh_dir(std::string("deepseek_tf_") + family);
      if (!run_script("hf_transformers_logits.py", std::string("--make-random ") + family + " " + (dir / "hf").string())) {
        WARN("SKIPPED: no Python with torch + transformers (set STRATA_TRANSFORMERS_PYTHON)");
        fs::remove_all(dir);
        return;
      }
      CHECK(compare_import("hf_transformers_logits.py", dir / "hf", dir / "ckpt", 1e-4).has_value());
      CHECK(compare_import("hf_reference.py", dir / "hf", dir / "ckpt2", 1e-4).has_value());
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf deepseek: import keeps the MTP layers the file holds, fewer on request, none from save_pretrained",
          "[hf][mla][mtp]") {
  const fs::path dir = fresh_dir("deepseek_mtp");
  transformers_config("make deepseek_v3 " + (dir / "hf").string());
  const hf::ImportResult all = hf::import_checkpoint((dir / "hf").string(), (dir / "a").string());
  CHECK(all.config.model->mtp_depths() == 1);
  CHECK(all.notes.empty());
  const auto t = checkpoint_tensors(dir / "a", "iter_0000000");
  const auto hf_t = formats::read_safetensors((dir / "hf" / "model.safetensors").string()).tensors;
  CHECK(test::max_abs_diff(t.at("mtp.layers.0.eh_proj.weight"), hf_t.at("model.layers.3.eh_proj.weight")) == 0.0);
  CHECK(test::max_abs_diff(t.at("mtp.layers.0.final_layernorm.weight"),
                           hf_t.at("model.layers.3.shared_head.norm.weight")) == 0.0);
  CHECK(test::max_abs_diff(t.at("mtp.layers.0.transformer_layer.mlp.router.expert_bias"),
                           hf_t.at("model.layers.3.mlp.gate.e_score_correction_bias")) == 0.0);
  // An override asks for no MTP: the layer's tensors are left out with a note.
  const hf::ImportResult none =
      hf::import_checkpoint((dir / "hf").string(), (dir / "b").string(), {"model.mtp_num_layers=null"});
  CHECK(none.config.model->mtp_depths() == 0);
  REQUIRE(none.notes.size() == 1);
  CHECK_THAT(none.notes[0], Contains("MTP layers model.layers.3-3 are left out"));
  // config.json says 1 but the file holds none (as transformers' save_pretrained writes it).
  nlohmann::json j = read_json(dir / "hf" / "config.json");
  std::map<std::string, Tensor> main_only;
  for (const auto& [name, x] : hf_t)
    if (name.rfind("model.layers.3.", 0) != 0) main_only[name] = x;
  fs::create_directories(dir / "no_mtp");
  formats::write_safetensors((dir / "no_mtp" / "model.safetensors").string(), main_only, {{"format", "pt"}});
  std::ofstream(dir / "no_mtp" / "config.json") << j.dump(2);
  const hf::ImportResult absent = hf::import_checkpoint((dir / "no_mtp").string(), (dir / "c").string());
  CHECK(absent.config.model->mtp_depths() == 0);
  REQUIRE(absent.notes.size() == 1);
  CHECK_THAT(absent.notes[0], Contains("num_nextn_predict_layers is 1 but the file holds 0"));
  // A copy of the embedding that differs from the model's is refused (Strata's MTP shares it).
  main_only = hf_t;
  main_only["model.layers.3.embed_tokens.weight"] = test::random_tensor(hf_t.at("model.embed_tokens.weight").shape(), 9);
  formats::write_safetensors((dir / "no_mtp" / "model.safetensors").string(), main_only, {{"format", "pt"}});
  CHECK_THROWS_WITH(hf::import_checkpoint((dir / "no_mtp").string(), (dir / "d").string()),
                    Contains("model.layers.3.embed_tokens.weight") && Contains("Strata's MTP layers share them"));
  fs::remove_all(dir);
}

TEST_CASE("hf deepseek: configs DeepseekV3ForCausalLM cannot express are export errors naming the field", "[hf][mla]") {
  const auto finalized = [](const std::function<void(ModelConfig&)>& edit) {
    StrataConfig c = deepseek_config(false, Precision::Fp32);
    edit(c.model);
    return ResolvedModelConfig(c.model);
  };
  CHECK(hf::family_for(finalized([](ModelConfig&) {})) == hf::Family::DeepseekV3);
  const std::vector<std::pair<std::function<void(ModelConfig&)>, std::string>> refused = {
      {[](ModelConfig& m) { m.layernorm_epsilon = 1e-5; }, "model.layernorm_epsilon=1e-05"},
      {[](ModelConfig& m) { m.qk_layernorm = false; }, "model.qk_layernorm=false"},
      {[](ModelConfig& m) { m.moe_router_group_topk = 3; }, "model.moe_router_group_topk=3"},  // 4 // 3 = 1
      {[](ModelConfig& m) { m.moe_shared_expert_intermediate_size = std::nullopt; },
       "model.moe_shared_expert_intermediate_size is not set"},
      {[](ModelConfig& m) { m.moe_shared_expert_intermediate_size = 18; },
       "model.moe_shared_expert_intermediate_size=18"},
      {[](ModelConfig& m) { m.moe_layer_freq = {"1", "0", "1"}; }, "model.moe_layer_freq"},
      {[](ModelConfig& m) {
         m.moe_router_score_function = MoeScoreFunction::Softmax;
         m.moe_router_enable_expert_bias = false;
       },
       "model.moe_router_score_function=softmax"},
      {[](ModelConfig& m) { m.moe_shared_expert_gate = true; }, "model.moe_shared_expert_gate=true"},
      {[](ModelConfig& m) {
         m.rope_type = RopeType::Rope;
         m.rotary_scaling_factor = 1.0;
         m.yarn_original_max_position_embeddings = 4096;
       },
       ""},  // plain RoPE exports
  };
  for (const auto& [edit, message] : refused) {
    DYNAMIC_SECTION((message.empty() ? "rope_type rope" : message)) {
      if (message.empty()) {
        CHECK(hf::family_for(finalized(edit)) == hf::Family::DeepseekV3);
      } else {
        CHECK_THROWS_WITH(hf::family_for(finalized(edit)),
                          Contains("not DeepseekV3ForCausalLM") && Contains(message));
      }
    }
  }
  // Another family never takes an MLA model, and the repeated MTP layer has no DeepSeek layout.
  CHECK_THAT(*hf::incompatibility(finalized([](ModelConfig&) {}), hf::Family::Qwen3Moe),
             Contains("model.multi_latent_attention=true"));
  const ResolvedModelConfig repeated = finalized([](ModelConfig& m) {
    m.mtp_num_layers = 2;
    m.mtp_use_repeated_layer = true;
  });
  CHECK(hf::detail::deepseek_export_mtp_layers(repeated) == 0);
  CHECK_THAT(*hf::detail::deepseek_mtp_unexportable(repeated), Contains("model.mtp_use_repeated_layer=true"));
}

TEST_CASE("hf deepseek import: what transformers computes and Strata cannot is an error naming the key", "[hf][mla]") {
  const fs::path dir = fresh_dir("deepseek_refuse");
  transformers_config("make deepseek_v3 " + (dir / "hf").string());
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> refused = {
      {[](nlohmann::json& j) { j["rms_norm_eps"] = 1e-5; }, "rms_norm_eps 1e-05 is not supported"},
      {[](nlohmann::json& j) { j["topk_group"] = 1; }, "they agree only when that quotient is 2"},
      {[](nlohmann::json& j) { j["norm_topk_prob"] = false; }, "norm_topk_prob false with num_experts_per_tok 4"},
      {[](nlohmann::json& j) { j["rope_interleave"] = false; }, "rope_interleave=false"},
      {[](nlohmann::json& j) { j["attention_bias"] = true; }, "attention_bias=true"},
      {[](nlohmann::json& j) { j["n_shared_experts"] = 0; }, "n_shared_experts 0"},
      {[](nlohmann::json& j) { j["scoring_func"] = "softmax"; }, "scoring_func 'softmax'"},
      {[](nlohmann::json& j) { j["num_key_value_heads"] = 2; }, "num_key_value_heads 2"},
      {[](nlohmann::json& j) { j["moe_layer_freq"] = 2; }, "moe_layer_freq 2"},
      {[](nlohmann::json& j) { j["quantization_config"] = {{"quant_method", "fp8"}}; }, "dequantize the FP8"},
      {[](nlohmann::json& j) { j["rope_parameters"]["rope_type"] = "linear"; }, "is not supported"},
      {[](nlohmann::json& j) {
         j["architectures"] = {"DeepseekV2ForCausalLM"};
         j["model_type"] = "deepseek_v2";
       },
       "DeepseekV2ForCausalLM (DeepSeek-V2"},
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
