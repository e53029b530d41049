// GptOssForCausalLM (training/hf/hf_gpt_oss_format.h, hf_gpt_oss_map.h):
// - the tensor layouts against a hand-built case: Megatron's expert fc1 rows [gate; up] are
//   gate_up_proj's interleaved columns (gate 2r, up 2r + 1), fc2 is down_proj transposed, the qkv
//   weight and bias split per query group, the sinks and router bias one to one; and back;
// - config.json's layer_types / sliding_window from model.window_size and window_attn_skip_freq
//   (transformers keeps keys kv > q − W: window_size [W − 1, 0]);
// - the configs other families cannot express (sliding windows, sinks) are refused by them;
// - a tiny gpt-oss (sinks, a window of 4 keys on every other layer over 13 tokens, YaRN, biased
//   router and experts, the clamped quick GeGLU): export → import → export bit-identical, the numpy
//   reference of transformers' GptOssForCausalLM (tests/hf/hf_reference.py) equal to Strata's f64
//   forward to 1e-9 and to `strata generate --score` within f32 rounding; GptOssConfig's directories
//   (both spellings) import with the reference's logits; exports pass hf_transformers_config.py check;
// - what transformers computes differently is refused, naming the field or key.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_test_helpers.h"
#include "core/formats/safetensors.h"
#include "hf_test_helpers.h"
#include "training/hf/hf_export.h"
#include "training/hf/hf_families.h"
#include "training/hf/hf_format.h"
#include "training/inference/generation.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::vector<int64_t>& kIds = kHfTestIds;

// A tiny gpt-oss: 3 layers of hidden 32, 4 heads of 8 in 2 query groups with sinks, a window of 4
// keys (window_size [3, 0]) on layers 0 and 2 (window_attn_skip_freq 2), YaRN factor 4 over 16
// (truncate false), every layer MoE: 4 experts of 12, top-2, the quick GeGLU with offset 1 and clamp
// 1.0 (so that some activations clamp), biases everywhere, untied unless `tied`; vocabulary 257.
StrataConfig gpt_oss_config(bool tied, Precision precision) {
  StrataConfig c;
  ModelConfig& m = c.model;
  set_tiny_hf_model(m);
  m.num_layers = 3;
  m.group_query_attention = true;
  m.num_query_groups = 2;
  m.kv_channels = 8;
  m.max_position_embeddings = 64;
  m.layernorm_epsilon = 1e-5;
  m.position_embedding_type = PositionEmbeddingType::Yarn;
  m.rotary_base = 150000;
  m.rotary_scaling_factor = 4.0;
  m.yarn_original_max_position_embeddings = 16;
  m.yarn_correction_range_round_to_int = false;
  m.add_bias_linear = true;
  m.quick_geglu = true;
  m.glu_linear_offset = 1.0;
  m.activation_func_clamp_value = 1.0;
  m.softmax_type = SoftmaxType::Learnable;
  m.window_size = {3, 0};
  m.window_attn_skip_freq = {"2"};
  m.untie_embeddings_and_output_weights = !tied;
  m.ffn_hidden_size = 40;
  m.num_experts = 4;
  m.moe_ffn_hidden_size = 12;
  m.moe_router_topk = 2;
  m.moe_aux_loss_coeff = {0.01};
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

std::map<std::string, Tensor> saved_tensors(const fs::path& save, const char* iter) {
  return formats::read_safetensors((save / iter / "model_rank_0000.safetensors").string()).tensors;
}

// One gpt-oss-shaped layer set: hidden 4, 2 heads of 2 in 1 query group, 2 experts of FFN 2,
// `layers` layers, vocabulary 5, window 3 keys on every other layer.
ModelConfig gpt_oss_model(int64_t layers) {
  ModelConfig m;
  m.num_layers = layers;
  m.hidden_size = 4;
  m.num_attention_heads = 2;
  m.group_query_attention = true;
  m.num_query_groups = 1;
  m.kv_channels = 2;
  m.vocab_size = 5;
  m.make_vocab_size_divisible_by = 8;
  m.seq_length = 8;
  m.normalization = Normalization::RMSNorm;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.add_bias_linear = true;
  m.swiglu = true;
  m.num_experts = 2;
  m.moe_ffn_hidden_size = 2;
  m.ffn_hidden_size = 8;
  m.moe_router_topk = 2;
  m.softmax_type = SoftmaxType::Learnable;
  m.window_size = {2, 0};
  m.window_attn_skip_freq = {"2"};
  m.untie_embeddings_and_output_weights = true;
  return m;
}

// Distinct values 100·k + i for tensor number k.
Tensor numbered(const Shape& s, int64_t k) {
  Tensor t = Tensor::empty(s, DType::F32);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 100.0 * static_cast<double>(k) + static_cast<double>(i);
  return Tensor::from_vector(v, s, DType::F32);
}

double at(const Tensor& t, const std::vector<int64_t>& idx) {
  int64_t flat = 0;
  for (size_t d = 0; d < idx.size(); ++d) flat = flat * t.size(static_cast<int>(d)) + idx[d];
  return t.contiguous().to_vector()[static_cast<size_t>(flat)];
}

}  // namespace

TEST_CASE("hf gpt_oss: tensor layouts, hand-built (interleaved gate_up, transposed down, qkv per group, sinks)",
          "[hf][gpt_oss]") {
  const ResolvedModelConfig m(gpt_oss_model(1));
  const int64_t h = 4, F = 2, vocab_rows = 8;
  std::map<std::string, Tensor> mg;
  int64_t k = 0;
  auto add = [&](const std::string& name, const Shape& s) { mg[name] = numbered(s, ++k); };
  add("embedding.word_embeddings.weight", {vocab_rows, h});
  add("output_layer.weight", {vocab_rows, h});
  add("decoder.final_layernorm.weight", {h});
  const std::string p = "decoder.layers.0.";
  add(p + "self_attention.linear_qkv.layer_norm_weight", {h});
  add(p + "self_attention.linear_qkv.weight", {(2 + 2) * 2, h});  // one group: [q0, q1, k, v] × 2 channels
  add(p + "self_attention.linear_qkv.bias", {8});
  add(p + "self_attention.linear_proj.weight", {h, 4});
  add(p + "self_attention.linear_proj.bias", {h});
  add(p + "self_attention.core_attention.softmax_offset", {2});
  add(p + "mlp.linear_fc1.layer_norm_weight", {h});
  add(p + "mlp.router.weight", {2, h});
  add(p + "mlp.router.bias", {2});
  for (int e = 0; e < 2; ++e) {
    add(p + "mlp.experts.linear_fc1.weight" + std::to_string(e), {2 * F, h});
    add(p + "mlp.experts.linear_fc1.bias" + std::to_string(e), {2 * F});
    add(p + "mlp.experts.linear_fc2.weight" + std::to_string(e), {h, F});
    add(p + "mlp.experts.linear_fc2.bias" + std::to_string(e), {h});
  }
  const std::map<std::string, Tensor> hf = hf::to_hf_tensors(m, hf::Family::GptOss, mg);
  const std::string q = "model.layers.0.";
  const Tensor& gu = hf.at(q + "mlp.experts.gate_up_proj");  // [E, h, 2F]
  REQUIRE(gu.shape() == Shape({2, h, 2 * F}));
  for (int64_t e = 0; e < 2; ++e) {
    const Tensor& fc1 = mg.at(p + "mlp.experts.linear_fc1.weight" + std::to_string(e));
    const Tensor& b1 = mg.at(p + "mlp.experts.linear_fc1.bias" + std::to_string(e));
    const Tensor& fc2 = mg.at(p + "mlp.experts.linear_fc2.weight" + std::to_string(e));
    for (int64_t r = 0; r < F; ++r) {
      for (int64_t j = 0; j < h; ++j) {
        CHECK(at(gu, {e, j, 2 * r}) == at(fc1, {r, j}));          // gate row r → column 2r
        CHECK(at(gu, {e, j, 2 * r + 1}) == at(fc1, {F + r, j}));  // up row r → column 2r + 1
        CHECK(at(hf.at(q + "mlp.experts.down_proj"), {e, r, j}) == at(fc2, {j, r}));
      }
      CHECK(at(hf.at(q + "mlp.experts.gate_up_proj_bias"), {e, 2 * r}) == at(b1, {r}));
      CHECK(at(hf.at(q + "mlp.experts.gate_up_proj_bias"), {e, 2 * r + 1}) == at(b1, {F + r}));
    }
    CHECK(test::max_abs_diff(hf.at(q + "mlp.experts.down_proj_bias").select(0, e).contiguous(),
                             mg.at(p + "mlp.experts.linear_fc2.bias" + std::to_string(e))) == 0.0);
  }
  // One query group: rows [q0 (2) | q1 (2) | k (2) | v (2)].
  const Tensor& qkv_b = mg.at(p + "self_attention.linear_qkv.bias");
  CHECK(at(hf.at(q + "self_attn.q_proj.bias"), {3}) == at(qkv_b, {3}));
  CHECK(at(hf.at(q + "self_attn.k_proj.bias"), {1}) == at(qkv_b, {5}));
  CHECK(at(hf.at(q + "self_attn.v_proj.weight"), {0, 2}) == at(mg.at(p + "self_attention.linear_qkv.weight"), {6, 2}));
  CHECK(test::max_abs_diff(hf.at(q + "self_attn.sinks"), mg.at(p + "self_attention.core_attention.softmax_offset")) == 0);
  CHECK(test::max_abs_diff(hf.at(q + "mlp.router.bias"), mg.at(p + "mlp.router.bias")) == 0);
  CHECK(hf.at("model.embed_tokens.weight").shape() == Shape({5, h}));  // the real vocabulary only
  CHECK(hf.size() == 3 + 17);  // embed, lm_head, norm; a layer: 2 norms, q/k/v/o weights and biases, sinks, router (2), experts (4)
  // And back: every canonical tensor (the vocabulary padded again by repeating the last row).
  const std::map<std::string, Tensor> back = hf::from_hf_tensors(m, hf::Family::GptOss, 5, vocab_rows, hf, "x");
  REQUIRE(back.size() == mg.size());
  for (const auto& [name, t] : mg) {
    INFO(name);
    const bool vocab = name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
    CHECK(test::max_abs_diff(vocab ? back.at(name).narrow(0, 0, 5).contiguous() : back.at(name),
                             vocab ? t.narrow(0, 0, 5).contiguous() : t) == 0.0);
  }
}

TEST_CASE("hf gpt_oss: layer_types and sliding_window from model.window_size and window_attn_skip_freq",
          "[hf][gpt_oss]") {
  hf::ExportInfo info;
  const auto layers_of = [&](const std::function<void(ModelConfig&)>& edit) {
    ModelConfig c = gpt_oss_model(4);
    edit(c);
    return hf::config_json(ResolvedModelConfig(c), hf::Family::GptOss, info);
  };
  const auto alternate = layers_of([](ModelConfig&) {});
  CHECK(alternate.at("layer_types") ==
        nlohmann::json::array({"sliding_attention", "full_attention", "sliding_attention", "full_attention"}));
  CHECK(alternate.at("sliding_window") == 3);  // window_size [2, 0]: keys q-2 … q, transformers' kv > q - 3
  CHECK(alternate.at("strata").at("window_attn_skip_freq") == nlohmann::json::array({"2"}));
  CHECK(alternate.at("attention_bias") == true);
  CHECK(alternate.at("swiglu_alpha") == 1.702);
  const auto listed = layers_of([](ModelConfig& c) { c.window_attn_skip_freq = {"0", "1", "1", "0"}; });
  CHECK(listed.at("layer_types") ==
        nlohmann::json::array({"full_attention", "sliding_attention", "sliding_attention", "full_attention"}));
  const auto none = layers_of([](ModelConfig& c) {
    c.window_size.clear();
    c.window_attn_skip_freq.clear();
  });
  CHECK(none.at("layer_types")[0] == "full_attention");
  CHECK(none.at("sliding_window") == none.at("max_position_embeddings"));  // transformers needs one anyway
}

TEST_CASE("hf: sliding windows and attention sinks are refused by the families without them", "[hf][gpt_oss]") {
  StrataConfig c = family_config(hf::Family::Llama, false, Precision::Fp32);
  c.model.window_size = {3, 0};
  CHECK_THROWS_WITH(hf::family_for(ResolvedModelConfig(c.model)),
                    Contains("not LlamaForCausalLM") && Contains("model.window_size"));
  c.model.window_size.clear();
  c.model.softmax_type = SoftmaxType::OffByOne;
  CHECK_THROWS_WITH(hf::family_for(ResolvedModelConfig(c.model)), Contains("model.softmax_type=off-by-one"));
  StrataConfig moe = family_config(hf::Family::Mixtral, false, Precision::Fp32);
  moe.model.softmax_type = SoftmaxType::Learnable;
  // An MoE model with sinks goes to GptOssForCausalLM, which names what else it lacks.
  CHECK_THROWS_WITH(hf::family_for(ResolvedModelConfig(moe.model)),
                    Contains("not GptOssForCausalLM") && Contains("model.add_bias_linear=false"));
}

TEST_CASE("hf gpt_oss: export → import → export is bit-identical (f32 untied, bf16 tied)", "[hf][gpt_oss]") {
  for (const bool tied : {false, true}) {
    DYNAMIC_SECTION((tied ? "bf16 tied" : "f32 untied")) {
      const fs::path dir = fresh_dir("gpt_oss_roundtrip");
      const StrataConfig cfg = gpt_oss_config(tied, tied ? Precision::Bf16 : Precision::Fp32);
      auto model = save_random_model(cfg, dir / "ckpt", 13);
      const hf::ExportResult ex = hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
      CHECK(ex.family == hf::Family::GptOss);
      const auto cj = read_json(dir / "hf" / "config.json");
      CHECK(cj.at("architectures")[0] == "GptOssForCausalLM");
      CHECK(cj.at("layer_types") == nlohmann::json::array({"sliding_attention", "full_attention", "sliding_attention"}));
      CHECK(cj.at("sliding_window") == 4);
      CHECK(cj.at("swiglu_limit") == 1.0);
      CHECK(cj.at("intermediate_size") == 12);
      CHECK(cj.at("rope_parameters").at("rope_type") == "yarn");
      CHECK(cj.at("rope_parameters").at("truncate") == false);
      const auto t = formats::read_safetensors((dir / "hf" / "model.safetensors").string()).tensors;
      CHECK(t.at("model.layers.1.mlp.experts.gate_up_proj").shape() == Shape{4, 32, 24});
      CHECK(t.at("model.layers.1.mlp.experts.down_proj").shape() == Shape{4, 12, 32});
      CHECK(t.at("model.layers.2.self_attn.sinks").shape() == Shape{4});
      CHECK(t.at("model.layers.0.self_attn.k_proj.bias").shape() == Shape{16});
      CHECK(t.at("model.layers.0.mlp.router.bias").shape() == Shape{4});
      const hf::ImportResult im = hf::import_checkpoint((dir / "hf").string(), (dir / "imported").string());
      CHECK(im.family == hf::Family::GptOss);
      CHECK(im.notes.empty());
      CHECK(im.config.model->window_attn_skip_freq == cfg.model.window_attn_skip_freq);
      CHECK(im.config.model->activation_func_clamp_value == std::optional<double>(1.0));
      const auto ta = saved_tensors(dir / "ckpt", "iter_0000007"), tb = saved_tensors(dir / "imported", "iter_0000000");
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
      const Tensor ids = Tensor::from_data(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 9});
      CHECK(test::max_abs_diff(lm.model->logits_for(ids, nullptr, 0), model->logits_for(ids, nullptr, 0)) == 0.0);
      const nlohmann::json rd = transformers_config("check " + (dir / "hf").string()).at("reading");
      CHECK(rd.at("sliding_window") == 4);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf gpt_oss reference: transformers' scores of gpt-oss exports equal strata generate --score",
          "[hf][gpt_oss]") {
  REQUIRE(numpy_available());
  for (const bool rope : {false, true}) {
    DYNAMIC_SECTION((rope ? "plain RoPE, every layer windowed, no clamp, tied" : "YaRN, window on layers 0 and 2")) {
      const fs::path dir = fresh_dir("gpt_oss_score");
      StrataConfig cfg = gpt_oss_config(rope, Precision::Fp32);
      if (rope) {
        cfg.model.position_embedding_type = PositionEmbeddingType::Rope;
        cfg.model.rotary_scaling_factor = 1.0;
        cfg.model.yarn_original_max_position_embeddings = 4096;
        cfg.model.yarn_correction_range_round_to_int = true;
        cfg.model.window_attn_skip_freq.clear();
        cfg.model.window_size = {5, -1};
        cfg.model.activation_func_clamp_value = std::nullopt;
      }
      auto model = save_random_model(cfg, dir / "ckpt", rope ? 61 : 62);
      hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
      const auto ref = script_logits("hf_reference.py", dir / "hf", kIds);
      REQUIRE(ref.has_value());
      double max_abs = 0;
      const double d64 = max_logit_diff(*ref, f64_logits(*model, cfg, kIds), 257, &max_abs);
      INFO("max |Strata f64 - numpy transformers| logit = " << d64 << ", max |logit| = " << max_abs);
      CHECK(max_abs > 1.0);
      CHECK(d64 < 1e-9);
      const auto scored = nlohmann::json::parse(
          *run_script("hf_reference.py", "--score " + (dir / "hf").string() + " " + ids_text(kIds)));
      const CliResult r = run_cli({"generate", "--load", (dir / "ckpt").string(), "--prompt-ids", ids_text(kIds), "--score"});
      INFO(r.err);
      REQUIRE(r.rc == 0);
      const auto ours = nlohmann::json::parse(r.out);
      double diff = 0;
      for (size_t i = 1; i < kIds.size(); ++i)
        diff = std::max(diff, std::abs(ours.at("logprobs")[i].get<double>() - scored.at("logprobs")[i].get<double>()));
      INFO("max |--score - numpy transformers| = " << diff);
      CHECK(diff < 3e-5);
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("hf gpt_oss: GptOssConfig's directories import, in both spellings, with the reference's logits",
          "[hf][gpt_oss]") {
  REQUIRE(numpy_available());
  const fs::path dir = fresh_dir("gpt_oss_make");
  const nlohmann::json now = transformers_config("make gpt_oss " + (dir / "v5").string());
  transformers_config("make gpt_oss " + (dir / "old").string() + " --old-spelling");
  CHECK_FALSE(read_json(dir / "old" / "config.json").contains("swiglu_alpha"));
  const std::vector<int64_t> ids = {1, 5, 9, 33, 2, 95, 0, 60, 17, 3};
  std::optional<hf::ImportResult> first;
  for (const char* spelling : {"v5", "old"}) {
    const auto theirs = script_logits("hf_reference.py", dir / spelling, ids);
    REQUIRE(theirs.has_value());
    const hf::ImportResult im = hf::import_checkpoint((dir / spelling).string(), (dir / (std::string("ck_") + spelling)).string());
    CHECK(im.family == hf::Family::GptOss);
    generation::LoadedModel lm =
        generation::load_for_inference((dir / (std::string("ck_") + spelling)).string(), {"training.device=cpu"});
    const Tensor ours =
        lm.model->logits_for(Tensor::from_data(ids, Shape{1, static_cast<int64_t>(ids.size())}), nullptr, 0);
    double max_abs = 0;
    const double d = max_logit_diff(*theirs, ours.to_vector(), 96, &max_abs);
    INFO(spelling << ": max |ours - reference| = " << d << ", max |logit| = " << max_abs);
    CHECK(max_abs > 0.5);
    CHECK(d < 1e-4);
    if (first) CHECK(first->config.to_yaml() == im.config.to_yaml());
    else first.emplace(im);
  }
  const ResolvedModelConfig& m = first->config.model;
  const nlohmann::json& rd = now.at("reading");
  CHECK(m->window_size == std::vector<int64_t>{rd.at("sliding_window").get<int64_t>() - 1, 0});
  CHECK(m->window_attn_skip_freq == std::vector<std::string>{"2"});
  CHECK(m->softmax_type == SoftmaxType::Learnable);
  CHECK(m->quick_geglu);
  CHECK(m->glu_linear_offset == 1.0);
  CHECK(m->activation_func_clamp_value == std::optional<double>(1.0));
  CHECK(m->position_embedding_type == PositionEmbeddingType::Yarn);
  CHECK(m->rotary_base == 150000);
  CHECK_FALSE(m->yarn_correction_range_round_to_int);
  CHECK(*m->num_experts == rd.at("experts").get<int64_t>());
  fs::remove_all(dir);
}

TEST_CASE("hf gpt_oss: configs GptOssForCausalLM cannot express are export errors naming the field", "[hf][gpt_oss]") {
  const auto finalized = [](const std::function<void(ModelConfig&)>& edit) {
    StrataConfig c = gpt_oss_config(false, Precision::Fp32);
    edit(c.model);
    return ResolvedModelConfig(c.model);
  };
  CHECK(hf::family_for(finalized([](ModelConfig&) {})) == hf::Family::GptOss);
  const std::vector<std::pair<std::function<void(ModelConfig&)>, std::string>> refused = {
      {[](ModelConfig& m) { m.glu_linear_offset = 0.0; }, "model.glu_linear_offset=0"},
      {[](ModelConfig& m) { m.softmax_type = SoftmaxType::OffByOne; }, "model.softmax_type=off-by-one"},
      {[](ModelConfig& m) { m.moe_layer_freq = {"0", "1", "1"}; }, "model.moe_layer_freq makes layer 0 dense"},
      {[](ModelConfig& m) { m.moe_router_pre_softmax = true; }, "model.moe_router_pre_softmax=true"},
      {[](ModelConfig& m) { m.add_bias_linear = false; }, "model.add_bias_linear=false"},
      {[](ModelConfig& m) { m.qk_layernorm = true; }, "model.qk_layernorm=true"},
      {[](ModelConfig& m) { m.normalization = Normalization::LayerNorm; }, "model.normalization=LayerNorm"},
  };
  for (const auto& [edit, message] : refused) {
    DYNAMIC_SECTION(message) {
      CHECK_THROWS_WITH(hf::family_for(finalized(edit)), Contains("not GptOssForCausalLM") && Contains(message));
    }
  }
}

TEST_CASE("hf gpt_oss import: what transformers computes and Strata cannot is an error naming the key",
          "[hf][gpt_oss]") {
  const fs::path dir = fresh_dir("gpt_oss_refuse");
  transformers_config("make gpt_oss " + (dir / "hf").string());
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> refused = {
      {[](nlohmann::json& j) { j["swiglu_alpha"] = 1.5; }, "swiglu_alpha 1.5 is not supported"},
      {[](nlohmann::json& j) { j["attention_bias"] = false; }, "attention_bias=false"},
      {[](nlohmann::json& j) { j["num_experts_per_tok"] = 1; }, "num_experts_per_tok 1"},
      {[](nlohmann::json& j) { j["layer_types"][1] = "chunked_attention"; }, "'chunked_attention'"},
      {[](nlohmann::json& j) { j["sliding_window"] = nullptr; }, "sliding_window must be a positive integer"},
      {[](nlohmann::json& j) { j["quantization_config"] = {{"quant_method", "mxfp4"}}; }, "dequantize the MXFP4"},
      {[](nlohmann::json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.5; }, "partial_rotary_factor 0.5"},
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
