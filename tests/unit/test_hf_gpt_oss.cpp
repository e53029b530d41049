// GptOssForCausalLM (training/hf/hf_gpt_oss_format.h, hf_gpt_oss_map.h):
// - the tensor layouts against a hand-built case: Megatron's expert fc1 rows [gate; up] are
//   gate_up_proj's interleaved columns (gate 2r, up 2r + 1), fc2 is down_proj transposed, the qkv
//   weight and bias split per query group, the sinks and router bias one to one; and back;
// - config.json's layer_types / sliding_window from model.window_size and window_attn_skip_freq
//   (transformers keeps keys kv > q − W: window_size [W − 1, 0]);
// - the configs other families cannot express (sliding windows, sinks) are refused by them.
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hf_test_helpers.h"
#include "training/hf/hf_families.h"
#include "training/hf/hf_format.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;

namespace {

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
