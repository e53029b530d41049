// mHC wired into GPT (models/layers/transformer_layer.*, models/language_model_shell.*): one mHC
// layer against a direct float64 composition (tests/unit/mhc_reference.h around the plain
// sub-layers), f64 finite differences of a whole GPT mHC model (every parameter kind: mapping_proj,
// alphas, bias, hc_head_*; dense and MoE; learned and mean contraction; dropout on), canonical
// names and shapes, learned vs mean contraction, a checkpoint round trip, KV-cache generation,
// the n-stream residual observations and the config errors.
// Reference: Megatron-LM dev transformer_layer.py (HyperConnectionTransformerLayer),
// transformer_block.py (input_expand / learned_output_contract).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/observe.h"
#include "mhc_reference.h"
#include "models/gpt/gpt_model.h"
#include "checkpoint_round_trip.h"
#include "test_helpers.h"
#include "training/config/config.h"

namespace strata {
namespace {

// A full GPT layer with its two mHC sites (what the GPT stack builds under enable_hyper_connections).
layers::TransformerLayerSpec mhc_layer_spec() {
  layers::TransformerLayerSpec spec = layers::TransformerLayerSpec::full();
  spec.branch_hyper_connections = true;
  return spec;
}

ModelConfig mhc_model(int64_t n, bool learned, bool moe = false) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 8;
  m.num_attention_heads = 2;
  m.vocab_size = 30;
  m.make_vocab_size_divisible_by = 16;
  m.seq_length = 6;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  m.add_bias_linear = !moe;
  m.enable_hyper_connections = true;
  m.num_residual_streams = n;
  m.mhc_sinkhorn_iterations = 5;
  m.mhc_learned_output_contract = learned;
  if (moe) {
    m.num_experts = 4;
    m.moe_ffn_hidden_size = 6;
    m.moe_router_topk = 2;
    m.moe_aux_loss_coeff = {0.0};
  }
  return m;
}

GPTModelOptions f64_options() {
  GPTModelOptions o;
  o.dtype = DType::F64;
  o.seed = 77;
  return o;
}

using test::random_batch;

// Every constant-initialised parameter (norms, biases, alphas, hc_head_*) moved off its init.
void perturb(GPTModel& m, uint64_t salt) {
  for (Parameter* p : m.parameters()) {
    if (p->init_std > 0 || p->init_uniform) continue;
    Tensor r = test::random_tensor(p->value.shape(), philox::stream_id(p->name.c_str()) + salt, -0.3, 0.3);
    Tensor v = p->value.clone();
    for (int64_t i = 0; i < v.numel(); ++i) v.data<double>()[i] += r.data<double>()[i];
    p->value.copy_(v);
  }
}

std::map<std::string, Parameter*> by_name(GPTModel& m) {
  std::map<std::string, Parameter*> out;
  for (Parameter* p : m.parameters()) out[p->name] = p;
  return out;
}

double weighted_loss(GPTModel& m, const Batch& batch, const Tensor& w, int64_t step) {
  auto ctx = m.make_context(step, 0, /*training=*/true);
  return test::dot(m.forward(*ctx, batch), w);
}

// Central differences (f64) on 4 entries of every parameter against the analytic gradients.
void check_gradients(const ModelConfig& cfg_in) {
  ModelConfig cfg = cfg_in;
  cfg.init_method_std = 0.2;
  GPTModel model(cfg, f64_options());
  model.init_parameters(5);
  perturb(model, 0);
  const int64_t b = 2, s = 6, step = 4;
  const Batch batch = random_batch(b, s, *cfg.vocab_size, 3);
  const Tensor w = test::random_tensor({b, s}, 9, 0.5, 1.5);
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  auto ctx = model.make_context(step, 0, true);
  model.forward(*ctx, batch);
  model.backward(*ctx, w);
  int kinds = 0;
  for (Parameter* p : model.parameters()) {
    const std::vector<double> g = p->main_grad.to_vector();
    std::vector<int64_t> pick;
    const int64_t n = static_cast<int64_t>(g.size());
    for (int64_t k = 0; k < 4; ++k) pick.push_back((k * 7919 + 13) % n);
    pick.push_back(std::max_element(g.begin(), g.end(), [](double a, double c) { return std::abs(a) < std::abs(c); }) -
                   g.begin());
    double num = 0, den = 0, gn = 0;
    for (double v : g) gn += v * v;
    INFO(p->name);
    CHECK(gn > 0);
    double* x = p->value.data<double>();
    for (int64_t i : pick) {
      const double orig = x[i], h = 1e-4;
      x[i] = orig + h;
      const double lp = weighted_loss(model, batch, w, step);
      x[i] = orig - h;
      const double lm = weighted_loss(model, batch, w, step);
      x[i] = orig;
      const double fd = (lp - lm) / (2 * h);
      num += (fd - g[static_cast<size_t>(i)]) * (fd - g[static_cast<size_t>(i)]);
      den += fd * fd;
    }
    const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-3);
    INFO("normalized error " << err);
    CHECK(err <= 1e-6);
    for (const char* k : {"mapping_proj.weight", "alpha_pre", "alpha_post", "alpha_res", "hyper_connection.bias",
                          "hc_head_fn", "hc_head_base", "hc_head_scale"})
      if (p->name.find(k) != std::string::npos) ++kinds;
  }
  // 2 layers × 2 sites × 5 parameters, plus the learned head's 3.
  CHECK(kinds == 20 + (cfg.mhc_learned_output_contract ? 3 : 0));
}

}  // namespace

TEST_CASE("mhc gpt: one mHC layer equals the float64 composition merge(x, F(agg(x)))", "[mhc][mhc_gpt]") {
  // The mHC layer's branches against the reference mappings/aggregate/merge around the plain
  // attention-only and MLP-only layers (same parameters), whose output minus input is F(agg).
  ModelConfig raw_cfg = mhc_model(3, true);
  raw_cfg.hidden_dropout = 0.0;
  raw_cfg.attention_dropout = 0.0;
  raw_cfg.init_method_std = 0.3;
  const ResolvedModelConfig cfg(raw_cfg);
  const layers::LayerEnv env{DType::F64, Device::cpu()};
  const ParallelGroups g = ParallelGroups::single_process();
  layers::TransformerLayer hc(0, cfg, env, g, mhc_layer_spec());
  ModelConfig raw_plain = *cfg;  // the same section with mHC switched off
  raw_plain.enable_hyper_connections = false;
  const ResolvedModelConfig plain_cfg(raw_plain);
  layers::TransformerLayer attn(0, plain_cfg, env, g, layers::TransformerLayerSpec::attention_only());
  layers::TransformerLayer mlp(0, plain_cfg, env, g, layers::TransformerLayerSpec::mlp_only());
  std::vector<Parameter*> ps, pa, pm;
  hc.collect(ps);
  attn.collect(pa);
  mlp.collect(pm);
  std::map<std::string, Parameter*> plain;
  for (Parameter* p : pa) plain[p->name] = p;
  for (Parameter* p : pm) plain[p->name] = p;
  uint64_t k = 1;
  for (Parameter* p : ps) {
    p->value.copy_(test::random_tensor(p->value.shape(), 100 + k++, -0.5, 0.5));
    if (plain.count(p->name)) plain[p->name]->value.copy_(p->value);
  }
  CHECK(ps.size() == pa.size() + pm.size() + 10);
  const int64_t n = 3, C = 8, s = 4, b = 2, T = s * b;
  const Tensor x = test::random_tensor({s, b, n * C}, 7, -1.0, 1.0);
  layers::DropoutKeys keys;
  const Tensor got = hc.forward(x, keys, 0, nullptr, nullptr);

  auto vals = [](const Parameter& p) { return p.value.to_vector(); };
  std::map<std::string, Parameter*> hp;
  for (Parameter* p : ps) hp[p->name] = p;
  auto step = [&](const std::string& prefix, const std::vector<double>& xin, layers::TransformerLayer& plain_layer) {
    const std::vector<double> alpha = {hp[prefix + ".alpha_pre"]->value.to_vector()[0],
                                       hp[prefix + ".alpha_post"]->value.to_vector()[0],
                                       hp[prefix + ".alpha_res"]->value.to_vector()[0]};
    const test::mhc_ref::Maps maps = test::mhc_ref::mappings(xin, vals(*hp[prefix + ".mapping_proj.weight"]), alpha,
                                                             vals(*hp[prefix + ".bias"]), T, n, C, false, 1e-6);
    const std::vector<double> h_res = test::mhc_ref::sinkhorn(maps.res_logits, T, n, 5, 1e-6);
    const std::vector<double> agg = test::mhc_ref::aggregate(xin, maps.pre, T, n, C);
    const Tensor a = Tensor::from_data(agg, Shape{s, b, C});
    std::vector<double> y = plain_layer.forward(a, keys, 0, nullptr, nullptr).to_vector();
    for (size_t i = 0; i < y.size(); ++i) y[i] -= agg[i];
    return test::mhc_ref::merge(xin, h_res, maps.post, y, {}, {}, T, n, C);
  };
  std::vector<double> ref = step("decoder.layers.0.self_attention_hyper_connection", x.to_vector(), attn);
  ref = step("decoder.layers.0.mlp_hyper_connection", ref, mlp);
  double err = 0;
  const std::vector<double> gv = got.to_vector();
  REQUIRE(gv.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::abs(gv[i] - ref[i]));
  CHECK(err < 1e-12);
}

TEST_CASE("mhc gpt: f64 finite differences of the whole model (dense, MoE, learned, mean, dropout)",
          "[mhc][mhc_gpt]") {
  for (bool learned : {true, false}) {
    INFO("learned " << learned);
    check_gradients(mhc_model(3, learned));
  }
  check_gradients(mhc_model(2, true, /*moe=*/true));
}

TEST_CASE("mhc gpt: canonical names, shapes and weight decay (Megatron dev HyperConnectionTransformerLayer)",
          "[mhc][mhc_gpt]") {
  GPTModel m(mhc_model(4, true), f64_options());
  auto p = by_name(m);
  const std::string a = "decoder.layers.1.self_attention_hyper_connection.", f = "decoder.layers.0.mlp_hyper_connection.";
  REQUIRE(p.count(a + "mapping_proj.weight"));
  CHECK(p.at(a + "mapping_proj.weight")->value.shape() == Shape{24, 32});
  CHECK(!p.at(a + "mapping_proj.weight")->no_weight_decay);
  for (const char* s : {"alpha_pre", "alpha_post", "alpha_res", "bias"}) {
    INFO(s);
    REQUIRE(p.count(f + s));
    CHECK(p.at(f + s)->no_weight_decay);
  }
  CHECK(p.at(f + "bias")->value.shape() == Shape{24});
  CHECK(p.at("decoder.hc_head_fn")->value.shape() == Shape{4, 32});
  CHECK(p.at("decoder.hc_head_base")->value.shape() == Shape{4});
  CHECK(p.at("decoder.hc_head_scale")->value.shape() == Shape{1});
  CHECK(m.residual_stream().num_streams == 4);
  CHECK(m.residual_stream().activation_shape(6, 2) == Shape{6, 2, 32});
  GPTModel mean(mhc_model(4, false), f64_options());
  CHECK(by_name(mean).count("decoder.hc_head_fn") == 0);
  CHECK(by_name(mean).size() + 3 == p.size());
}

TEST_CASE("mhc gpt: learned vs mean contraction (outputs, gradients, checkpoint round trip)", "[mhc][mhc_gpt]") {
  GPTModel learned(mhc_model(3, true), f64_options()), mean(mhc_model(3, false), f64_options());
  learned.init_parameters(4);
  mean.init_parameters(4);
  auto pl = by_name(learned), pm = by_name(mean);
  for (auto& [name, p] : pm) CHECK(test::max_abs_diff(p->value, pl.at(name)->value) == 0.0);  // same init
  const Batch batch = random_batch(2, 6, 30, 5);
  const Tensor w = test::random_tensor({2, 6}, 3, 0.5, 1.5);
  const double ll = weighted_loss(learned, batch, w, 1), lm = weighted_loss(mean, batch, w, 1);
  CHECK(std::abs(ll - lm) > 1e-6);
  // The mean contraction is the learned one's formula with pre_j = 1/n: hc_head_scale 0 and a base
  // with σ(base) + eps = 1/n make them agree.
  pl.at("decoder.hc_head_scale")->value.fill_(0.0);
  const double eps = learned.config()->layernorm_epsilon, q = 1.0 / 3 - eps;
  pl.at("decoder.hc_head_base")->value.fill_(std::log(q / (1 - q)));
  CHECK(std::abs(weighted_loss(learned, batch, w, 1) - lm) < 1e-12);
  for (GPTModel* m : {&learned, &mean}) {
    for (Parameter* p : m->parameters()) p->main_grad.zero_();
    auto ctx = m->make_context(1, 0, true);
    m->forward(*ctx, batch);
    m->backward(*ctx, w);
  }
  for (auto& [name, p] : pm) {
    INFO(name);
    CHECK(test::max_abs_diff(p->main_grad, pl.at(name)->main_grad) < 1e-12);
  }
  CHECK(test::max_abs_diff(pl.at("decoder.hc_head_scale")->main_grad, Tensor::zeros({1}, DType::F64)) > 0);
  // Checkpoint round trip of the learned model (hc_head_* and the sites' parameters).
  perturb(learned, 17);
  GPTModel other(mhc_model(3, true), f64_options());
  other.init_parameters(99);
  test::checkpoint_round_trip(learned.parameters(), other.parameters(), "mhc_gpt", 2);
  auto po = by_name(other);
  for (auto& [name, p] : pl) CHECK(test::max_abs_diff(p->value, po.at(name)->value) == 0.0);
  CHECK(weighted_loss(other, batch, w, 1) == weighted_loss(learned, batch, w, 1));
}

TEST_CASE("mhc gpt: KV-cache generation carries the n streams per token", "[mhc][mhc_gpt]") {
  ModelConfig cfg = mhc_model(3, true);
  GPTModelOptions o;
  o.seed = 3;
  GPTModel model(cfg, o);
  model.init_parameters(3);
  const int64_t b = 2, s = 6;
  const Batch batch = random_batch(b, s, 30, 8);
  const Tensor full = model.logits_for(batch.tokens, nullptr, 0);
  KVCache cache = model.make_kv_cache(b, s);
  int64_t pos = 0;
  for (int64_t len : {2, 1, 3}) {
    const Tensor got = model.logits_for(batch.tokens.narrow(1, pos, len).contiguous(), &cache, pos);
    CHECK(test::max_abs_diff(got, full.narrow(1, pos, len).contiguous()) <= 1e-5);
    pos += len;
  }
}

namespace {
struct ResidualRecorder : Observer {
  std::map<std::string, Shape> shapes;
  void on_tensor(const Observation& o) override {
    shapes[std::string(o.owner) + "." + std::string(o.name)] = o.tensor.shape();
  }
};
}  // namespace

TEST_CASE("mhc gpt: the residual sites carry the streams as [s, b, n, h]", "[mhc][mhc_gpt][observe]") {
  GPTModel model(mhc_model(3, true), f64_options());
  model.init_parameters(1);
  ResidualRecorder rec;
  {
    CaptureScope scope(rec, SourceKinds{SourceKind::ResidualAccumulator, SourceKind::ResidualContribution});
    auto ctx = model.make_context(0, 0, true);
    model.forward(*ctx, random_batch(2, 6, 30, 1));
  }
  CHECK(rec.shapes.at("decoder.layers.1.residual_accumulator") == Shape{6, 2, 3, 8});
  CHECK(rec.shapes.at("decoder.layers.0.residual_contribution") == Shape{6, 2, 3, 8});
}

TEST_CASE("mhc gpt: config errors name the fields (mhc recompute rules)", "[mhc][mhc_gpt][config]") {
  auto err = [](const std::vector<std::string>& extra) {
    std::vector<std::string> o = {"training.train_iters=1", "optimizer.lr=1e-3", "data.mock_data=true",
                                  "model.enable_hyper_connections=true"};
    o.insert(o.end(), extra.begin(), extra.end());
    try {
      static_cast<void>(StrataConfig::from_yaml_text("{}", o).validate());
    } catch (const config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err({}) == "(no error)");
  // MTP with mHC is built (tests/unit/test_mhc_mtp.cpp).
  CHECK(err({"model.mtp_num_layers=1", "model.position_embedding_type=rope"}) == "(no error)");
  CHECK(err({"model.hybrid_layer_pattern=\"M*-/*-\"", "model.position_embedding_type=rope"}) == "(no error)");
  CHECK(err({"model.hybrid_layer_pattern=\"M*-\"", "model.position_embedding_type=rope"}) == "(no error)");
  CHECK(err({"model.recompute_granularity=selective", "model.recompute_modules=[mhc]"}) == "(no error)");
  CHECK_THAT(err({"model.recompute_granularity=selective", "model.recompute_modules=[mhc,mlp]"}),
             Catch::Contains("model.recompute_modules: mhc: cannot be combined with mlp"));
  CHECK_THAT(err({"model.recompute_granularity=selective", "model.recompute_modules=[mhc]",
                  "model.mhc_recompute_layer_num=0"}),
             Catch::Contains("model.mhc_recompute_layer_num"));
}


TEST_CASE("mhc gpt: the output linears' bias reaches the merge apart from y (Megatron's (output, bias) pair)",
          "[mhc][mhc_gpt]") {
  ModelConfig raw_cfg = mhc_model(2, true);  // add_bias_linear
  raw_cfg.hidden_dropout = 0.0;
  raw_cfg.attention_dropout = 0.0;
  const ResolvedModelConfig cfg(raw_cfg);
  const layers::LayerEnv env{DType::F64, Device::cpu()};
  layers::TransformerLayer layer(0, cfg, env, ParallelGroups::single_process(), mhc_layer_spec());
  std::vector<Parameter*> ps;
  layer.collect(ps);
  uint64_t k = 1;
  for (Parameter* p : ps) p->value.copy_(test::random_tensor(p->value.shape(), 300 + k++, -0.5, 0.5));
  const Tensor x = test::random_tensor({3, 2, 16}, 8, -1.0, 1.0);
  layers::TransformerLayer::Saved sv;
  layers::DropoutKeys keys;
  const Tensor out = layer.forward(x, keys, 0, nullptr, &sv);
  REQUIRE(sv.attention_hc.bias.defined());
  REQUIRE(sv.mlp_hc.bias.defined());
  CHECK(test::max_abs_diff(sv.attention_hc.bias, layer.self_attention().linear_proj.bias.value) == 0.0);
  CHECK(test::max_abs_diff(sv.mlp_hc.bias, layer.mlp().linear_fc2.bias.value) == 0.0);
  // y is the linear's output without its bias: the merge of (y, bias) is the layer's output.
  CHECK(out.shape() == x.shape());
}

}  // namespace strata
