// mHC in the hybrid stack (models/blocks/hybrid_mhc_layer.*): Megatron dev's names
// (decoder.layers.<i>.hyper_connection.*, the wrapped layer under decoder.layers.<i>.inner_layer.*,
// decoder.hc_head_*), a wrapped layer whose sub-layer returns 0 leaves x_next = H_resᵀx on both
// the fast path (`-`) and the delta path (`M`: no double counting of the input), f64 finite
// differences of a whole `M*E-` model with dropout (every parameter), and KV/state-cached
// generation with n streams.
// Reference: megatron/core/models/hybrid/hybrid_block.py (dev: HyperConnectionHybridLayer).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "mhc_reference.h"
#include "models/blocks/hybrid_mhc_layer.h"
#include "models/hybrid/hybrid_model.h"
#include "test_helpers.h"

namespace strata {
namespace {

ModelConfig hybrid_mhc(const std::string& pattern, double dropout) {
  ModelConfig m;
  m.hybrid_layer_pattern = pattern;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.vocab_size = 30;
  m.make_vocab_size_divisible_by = 8;
  m.seq_length = 6;
  m.hidden_dropout = dropout;
  m.attention_dropout = dropout;
  m.init_method_std = 0.2;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.add_bias_linear = false;
  m.num_experts = 4;
  m.moe_ffn_hidden_size = 8;
  m.moe_router_topk = 2;
  m.moe_aux_loss_coeff = {0.0};
  m.mamba_head_dim = 8;
  m.mamba_num_groups = 2;
  m.mamba_state_dim = 4;
  m.mamba_chunk_size = 4;
  m.enable_hyper_connections = true;
  m.num_residual_streams = 2;
  m.mhc_sinkhorn_iterations = 4;
  return m;
}

LanguageModelOptions f64_options() {
  LanguageModelOptions o;
  o.dtype = DType::F64;
  o.seed = 11;
  return o;
}

Batch batch_of(int64_t b, int64_t s, int64_t vocab) {
  std::vector<int64_t> tok(static_cast<size_t>(b * s)), lab(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int64_t>((i * 7 + 3) % static_cast<size_t>(vocab));
    lab[i] = static_cast<int64_t>((i * 5 + 1) % static_cast<size_t>(vocab));
  }
  Batch batch;
  batch.tokens = Tensor::from_data(tok, Shape{b, s});
  batch.labels = Tensor::from_data(lab, Shape{b, s});
  batch.loss_mask = Tensor::full({b, s}, 1.0, DType::F32);
  return batch;
}

double weighted_loss(HybridModel& m, const Batch& batch, const Tensor& w) {
  auto ctx = m.make_context(2, 0, /*training=*/true);
  return test::dot(m.forward(*ctx, batch), w);
}

}  // namespace

TEST_CASE("mhc hybrid: Megatron dev names (hyper_connection, inner_layer, hc_head)", "[mhc][mhc_hybrid]") {
  HybridModel m(hybrid_mhc("M*E-", 0.0), f64_options());
  std::map<std::string, Parameter*> p;
  for (Parameter* q : m.parameters()) p[q->name] = q;
  for (const char* n : {"decoder.layers.0.hyper_connection.mapping_proj.weight", "decoder.layers.3.hyper_connection.bias",
                        "decoder.layers.2.hyper_connection.alpha_res", "decoder.layers.0.inner_layer.mixer.in_proj.weight",
                        "decoder.layers.1.inner_layer.self_attention.linear_qkv.weight",
                        "decoder.layers.2.inner_layer.mlp.router.weight", "decoder.layers.3.inner_layer.mlp.linear_fc2.weight",
                        "decoder.hc_head_fn", "decoder.hc_head_base", "decoder.hc_head_scale", "decoder.final_norm.weight"}) {
    INFO(n);
    CHECK(p.count(n) == 1);
  }
  for (const auto& [name, q] : p) {
    INFO(name);
    CHECK(name.find("self_attention_hyper_connection") == std::string::npos);
    CHECK(name.find("mlp_hyper_connection") == std::string::npos);
  }
  CHECK(p.at("decoder.layers.1.hyper_connection.mapping_proj.weight")->value.shape() == Shape{8, 32});
  CHECK(m.residual_stream().num_streams == 2);
  CHECK(m.decoder().layer(0).name() == "decoder.layers.0");
}

TEST_CASE("mhc hybrid: a wrapped layer whose sub-layer returns 0 leaves x_next = H_res^T x (fast and delta path)",
          "[mhc][mhc_hybrid]") {
  ModelConfig raw_cfg = hybrid_mhc("M-", 0.0);
  const ResolvedModelConfig cfg(raw_cfg);
  const layers::LayerEnv env{DType::F64, Device::cpu()};
  const int64_t n = 2, C = 16, s = 4, b = 2, T = s * b;
  const Tensor x = test::random_tensor({s, b, n * C}, 5, -1.0, 1.0);
  for (char symbol : {'M', '-'}) {
    INFO(symbol);
    const std::vector<StackLayerSpec> specs =
        stack_layer_specs(cfg, std::string(1, symbol), 0, {"decoder.layers.0"}, {false}, MhcPlacement::PerLayer);
    HyperConnectionHybridLayer layer(specs.at(0), cfg, env, ParallelGroups::single_process());
    std::vector<Parameter*> ps;
    layer.collect(ps);
    std::map<std::string, Parameter*> p;
    uint64_t k = 1;
    for (Parameter* q : ps) {
      q->value.copy_(test::random_tensor(q->value.shape(), 40 + k++, -0.5, 0.5));
      p[q->name] = q;
    }
    const std::string out = symbol == 'M' ? "decoder.layers.0.inner_layer.mixer.out_proj.weight"
                                          : "decoder.layers.0.inner_layer.mlp.linear_fc2.weight";
    REQUIRE(p.count(out) == 1);
    p.at(out)->value.fill_(0.0);  // the sub-layer's output is 0
    BlockRun run;
    const std::vector<double> got = layer.forward(x, run, nullptr, nullptr, false).to_vector();
    const std::string hc = "decoder.layers.0.hyper_connection.";
    const std::vector<double> alpha = {p.at(hc + "alpha_pre")->value.to_vector()[0],
                                       p.at(hc + "alpha_post")->value.to_vector()[0],
                                       p.at(hc + "alpha_res")->value.to_vector()[0]};
    const auto maps = test::mhc_ref::mappings(x.to_vector(), p.at(hc + "mapping_proj.weight")->value.to_vector(), alpha,
                                              p.at(hc + "bias")->value.to_vector(), T, n, C, false, 1e-6);
    const auto h_res = test::mhc_ref::sinkhorn(maps.res_logits, T, n, 4, 1e-6);
    const auto want = test::mhc_ref::merge(x.to_vector(), h_res, maps.post, std::vector<double>(T * C, 0.0), {}, {}, T,
                                           n, C);
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
    CHECK(err < 1e-12);
  }
}

TEST_CASE("mhc hybrid: f64 finite differences of an M*E- model with dropout (every parameter)", "[mhc][mhc_hybrid]") {
  HybridModel model(hybrid_mhc("M*E-", 0.1), f64_options());
  model.init_parameters(5);
  for (Parameter* p : model.parameters()) {
    if (p->init_std > 0 || p->init_uniform) continue;
    Tensor r = test::random_tensor(p->value.shape(), philox::stream_id(p->name.c_str()), -0.3, 0.3);
    Tensor v = p->value.clone();
    for (int64_t i = 0; i < v.numel(); ++i) v.data<double>()[i] += r.data<double>()[i];
    p->value.copy_(v);
  }
  const Batch batch = batch_of(2, 6, 30);
  const Tensor w = test::random_tensor({2, 6}, 9, 0.5, 1.5);
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  auto ctx = model.make_context(2, 0, true);
  model.forward(*ctx, batch);
  model.backward(*ctx, w);
  int sites = 0;
  for (Parameter* p : model.parameters()) {
    const std::vector<double> g = p->main_grad.to_vector();
    const int64_t n = static_cast<int64_t>(g.size());
    std::vector<int64_t> pick = {n / 3, (7919 + 13) % n};
    pick.push_back(std::max_element(g.begin(), g.end(), [](double a, double c) { return std::abs(a) < std::abs(c); }) -
                   g.begin());
    double num = 0, den = 0, gn = 0;
    for (double v : g) gn += v * v;
    INFO(p->name);
    if (p->name.find("mlp.router") == std::string::npos) CHECK(gn > 0);
    double* x = p->value.data<double>();
    for (int64_t i : pick) {
      const double orig = x[i], h = 1e-4;
      x[i] = orig + h;
      const double lp = weighted_loss(model, batch, w);
      x[i] = orig - h;
      const double lm = weighted_loss(model, batch, w);
      x[i] = orig;
      const double fd = (lp - lm) / (2 * h);
      num += (fd - g[static_cast<size_t>(i)]) * (fd - g[static_cast<size_t>(i)]);
      den += fd * fd;
    }
    const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-3);
    INFO("normalized error " << err);
    CHECK(err <= 1e-6);
    sites += p->name.find(".hyper_connection.") != std::string::npos ? 1 : 0;
  }
  CHECK(sites == 4 * 5);
}

TEST_CASE("mhc hybrid: cached generation with n streams equals the full forward", "[mhc][mhc_hybrid]") {
  LanguageModelOptions o;
  o.seed = 3;
  HybridModel model(hybrid_mhc("M*-", 0.0), o);
  model.init_parameters(3);
  const Batch batch = batch_of(1, 6, 30);
  const Tensor whole = model.logits_for(batch.tokens, nullptr, 0);
  InferenceCache cache = model.make_inference_cache(1, 6);
  const Tensor first = model.logits_for(batch.tokens.narrow(1, 0, 4).contiguous(), &cache, 0);
  CHECK(test::max_abs_diff(first, whole.narrow(1, 0, 4).contiguous()) < 1e-4);
  for (int64_t pos : {4, 5}) {
    const Tensor next = model.logits_for(batch.tokens.narrow(1, pos, 1).contiguous(), &cache, pos);
    CHECK(test::max_abs_diff(next, whole.narrow(1, pos, 1).contiguous()) < 1e-4);
  }
}

}  // namespace strata
