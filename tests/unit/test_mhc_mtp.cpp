// Multi-token prediction with mHC (models/blocks/mtp_block.*, models/language_model_shell.cpp;
// Megatron dev's mHC MTP): Megatron's names (e_proj, h_proj and a per-depth hc_head_*
// instead of eh_proj), the depth input is the decoder's pre-contraction n-stream and the next depth
// takes the previous depth's raw n-stream output (both checked as invariances: the decoder's
// contraction and final norm do not change any MTP loss, depth 1's contraction and final norm do not
// change depth 2's loss), f64 finite differences of every parameter of GPT and hybrid mHC + MTP
// models (learned and mean contraction, repeated layer, dropout), detached heads, full recompute
// bit-identical to no recompute, a checkpoint round trip, generation ignoring the depths, and
// strata plan's MTP parameters (exact) and activations (against the allocator's peak).
// Reference: megatron/core/transformer/multi_token_prediction.py (dev 2f2f8ebaef:
// MultiTokenPredictionLayer._concat_embeddings / _postprocess, MultiTokenPredictionBlock.forward).
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "models/gpt/gpt_model.h"
#include "models/hybrid/hybrid_model.h"
#include "mtp_reference.h"
#include "model_probes.h"
#include "checkpoint_round_trip.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/planning/layer_plan.h"
#include "training/planning/memory_plan.h"
#include "training/config/model_factory.h"

namespace strata {
namespace {

using test::mtp_ref::by_name;
using test::mtp_ref::perturb;
using test::mtp_ref::Vec;
using test::mtp_ref::weighted;

constexpr int64_t kB = 2, kS = 6, kVocab = 30;

ModelConfig base(bool learned) {
  ModelConfig m;
  m.hidden_size = 8;
  m.num_attention_heads = 2;
  m.vocab_size = kVocab;
  m.make_vocab_size_divisible_by = 16;
  m.seq_length = kS;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  m.init_method_std = 0.2;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.enable_hyper_connections = true;
  m.num_residual_streams = 2;
  m.mhc_sinkhorn_iterations = 4;
  m.mhc_learned_output_contract = learned;
  return m;
}

ModelConfig gpt_cfg(bool learned, int64_t depths = 2) {
  ModelConfig m = base(learned);
  m.num_layers = 2;
  m.mtp_num_layers = depths;
  return m;
}

ModelConfig hybrid_cfg(const std::string& pattern, bool learned) {
  ModelConfig m = base(learned);
  m.hybrid_layer_pattern = pattern;
  m.add_bias_linear = false;
  m.num_experts = 4;
  m.moe_ffn_hidden_size = 6;
  m.moe_router_topk = 2;
  m.moe_aux_loss_coeff = {0.0};
  m.mamba_head_dim = 4;
  m.mamba_num_groups = 2;
  m.mamba_state_dim = 4;
  m.mamba_chunk_size = 3;
  return m;
}

std::unique_ptr<LanguageModelShell> build(const ModelConfig& cfg, DType dt = DType::F64) {
  LanguageModelOptions o;
  o.dtype = dt;
  o.seed = 21;
  if (cfg.hybrid_layer_pattern) return std::make_unique<HybridModel>(cfg, o);
  GPTModelOptions g;
  g.dtype = dt;
  g.seed = 21;
  return std::make_unique<GPTModel>(cfg, g);
}

std::vector<Tensor> loss_weights(const ForwardOutput& out, uint64_t seed) {
  std::vector<Tensor> w;
  for (const NamedLoss& l : out.losses)
    w.push_back(l.reduction == LossReduction::PerToken ? test::random_tensor(l.value.shape(), seed++, 0.5, 1.5, DType::F64)
                                                       : Tensor::full({1}, 0.4, DType::F64));
  return w;
}

std::vector<Vec> losses(LanguageModel& m, const Batch& batch) {
  auto ctx = m.make_context(3, 0, true);
  std::vector<Vec> out;
  for (const NamedLoss& l : m.forward_pass(*ctx, batch).losses) out.push_back(l.value.to_vector());
  return out;
}

// Central differences on 4 entries (and the largest-gradient entry) of every parameter; returns how
// many parameters of the MTP-with-mHC kinds were checked.
int check_all_gradients(const ModelConfig& cfg) {
  auto model = build(cfg);
  model->init_parameters(5);
  perturb(*model, 100);
  const Batch batch = test::fixed_batch(kB, kS, kVocab);
  for (Parameter* p : model->parameters()) p->main_grad.zero_();
  auto ctx = model->make_context(3, 0, true);
  const ForwardOutput out = model->forward_pass(*ctx, batch);
  const std::vector<Tensor> w = loss_weights(out, 40);
  BackwardInput in;
  in.loss_grads = w;
  model->backward_pass(*ctx, in);
  auto objective = [&] {
    auto c = model->make_context(3, 0, true);
    return weighted(model->forward_pass(*c, batch), w);
  };
  int kinds = 0;
  for (Parameter* p : model->parameters()) {
    const Vec g = p->main_grad.to_vector();
    const int64_t n = static_cast<int64_t>(g.size());
    std::vector<int64_t> pick;
    for (int64_t k = 0; k < 4; ++k) pick.push_back((k * 7919 + 13) % n);
    pick.push_back(std::max_element(g.begin(), g.end(), [](double a, double c) { return std::abs(a) < std::abs(c); }) -
                   g.begin());
    double num = 0, den = 0, gn = 0;
    for (double v : g) gn += v * v;
    INFO(p->name);
    CHECK(gn > 0);
    for (int64_t i : pick) {
      const double fd = test::central_difference(p->value.data<double>(), i, 1e-5, objective);
      num += (fd - g[static_cast<size_t>(i)]) * (fd - g[static_cast<size_t>(i)]);
      den += fd * fd;
    }
    const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-3);
    INFO("normalized error " << err);
    CHECK(err <= 1e-5);  // f64 central differences, h 1e-5 (a wrong term would be O(1))
    if (p->name.rfind("mtp.", 0) == 0)
      for (const char* k : {".e_proj.weight", ".h_proj.weight", "hc_head_fn", "hc_head_base", "hc_head_scale",
                            "mapping_proj.weight", "alpha_res"})
        if (p->name.find(k) != std::string::npos) ++kinds;
  }
  return kinds;
}

// Adds d to every entry of the named parameters.
void shift(LanguageModel& m, const std::vector<std::string>& names, double d) {
  auto ps = by_name(m);
  for (const std::string& n : names) {
    REQUIRE(ps.count(n));
    Vec v = ps[n]->value.to_vector();
    for (double& x : v) x += d;
    ps[n]->value.copy_(Tensor::from_vector(v, ps[n]->value.shape(), ps[n]->value.dtype()));
  }
}

}  // namespace

TEST_CASE("mhc mtp: Megatron dev's names and shapes (e_proj, h_proj, the depth's own hc_head_*)", "[mhc][mtp]") {
  for (const bool learned : {true, false}) {
    auto m = build(gpt_cfg(learned));
    auto ps = by_name(*m);
    INFO("learned " << learned);
    for (int k = 0; k < 2; ++k) {
      const std::string p = "mtp.layers." + std::to_string(k);
      REQUIRE(ps.count(p + ".e_proj.weight"));
      CHECK(ps[p + ".e_proj.weight"]->value.shape() == Shape{8, 8});
      CHECK(ps[p + ".h_proj.weight"]->value.shape() == Shape{8, 8});
      CHECK(ps.count(p + ".eh_proj.weight") == 0);
      CHECK(ps.count(p + ".enorm.weight") == 1);
      CHECK(ps.count(p + ".hnorm.weight") == 1);
      CHECK(ps.count(p + ".final_layernorm.weight") == 1);
      CHECK(ps.count(p + ".mtp_model_layer.self_attention_hyper_connection.mapping_proj.weight") == 1);
      CHECK(ps.count(p + ".mtp_model_layer.mlp_hyper_connection.alpha_res") == 1);
      CHECK(ps.count(p + ".hc_head_fn") == (learned ? 1u : 0u));
      if (learned) {
        CHECK(ps[p + ".hc_head_fn"]->value.shape() == Shape{2, 16});
        CHECK(ps[p + ".hc_head_base"]->value.shape() == Shape{2});
        CHECK(ps[p + ".hc_head_scale"]->value.shape() == Shape{1});
        CHECK(ps[p + ".hc_head_scale"]->no_weight_decay);
      }
    }
  }
  auto h = build(hybrid_cfg("M*-/*E", true));
  auto hp = by_name(*h);
  CHECK(hp.count("mtp.layers.0.e_proj.weight") == 1);
  CHECK(hp.count("mtp.layers.0.hc_head_fn") == 1);
  CHECK(hp.count("mtp.layers.0.mtp_model_layer.layers.0.hyper_connection.mapping_proj.weight") == 1);
  CHECK(hp.count("mtp.layers.0.mtp_model_layer.layers.1.inner_layer.mlp.router.weight") == 1);
}

TEST_CASE("mhc mtp: depth 1 reads the pre-contraction streams, depth 2 the raw streams of depth 1", "[mhc][mtp]") {
  for (const bool hybrid : {false, true}) {
    INFO((hybrid ? "hybrid" : "gpt"));
    const ModelConfig cfg = hybrid ? hybrid_cfg("M*-/*-/*-", true) : gpt_cfg(true);
    auto m = build(cfg);
    m->init_parameters(3);
    perturb(*m, 7);
    const Batch batch = test::fixed_batch(kB, kS, kVocab);
    const std::vector<Vec> ref = losses(*m, batch);
    REQUIRE(ref.size() == 3);  // lm, mtp_1, mtp_2
    const std::string fin = hybrid ? "decoder.final_norm.weight" : "decoder.final_layernorm.weight";
    // The decoder's contraction and final norm feed only the LM head.
    shift(*m, {"decoder.hc_head_fn", "decoder.hc_head_base", "decoder.hc_head_scale", fin}, 0.5);
    std::vector<Vec> got = losses(*m, batch);
    CHECK(got[0] != ref[0]);
    CHECK(got[1] == ref[1]);  // bitwise
    CHECK(got[2] == ref[2]);
    // Depth 1's contraction and final norm feed only depth 1's loss.
    shift(*m, {"mtp.layers.0.hc_head_fn", "mtp.layers.0.hc_head_base", "mtp.layers.0.final_layernorm.weight"}, 0.5);
    const std::vector<Vec> got2 = losses(*m, batch);
    CHECK(got2[1] != got[1]);
    CHECK(got2[2] == got[2]);
    // Depth 1's h_proj feeds both depths.
    shift(*m, {"mtp.layers.0.h_proj.weight"}, 0.1);
    const std::vector<Vec> got3 = losses(*m, batch);
    CHECK(got3[1] != got2[1]);
    CHECK(got3[2] != got2[2]);
  }
}

TEST_CASE("mhc mtp: f64 finite differences of every parameter, GPT (learned, mean, repeated layer)",
          "[mhc][mtp][mhc_gpt]") {
  // Per depth: e_proj, h_proj, 2 sites' mapping_proj and alpha_res, + 3 hc_head_* when learned.
  CHECK(check_all_gradients(gpt_cfg(true)) == 2 * (2 + 4 + 3));
  CHECK(check_all_gradients(gpt_cfg(false)) == 2 * (2 + 4));
  ModelConfig rep = gpt_cfg(true);
  rep.mtp_use_repeated_layer = true;
  CHECK(check_all_gradients(rep) == 2 + 4 + 3);
}

TEST_CASE("mhc mtp: f64 finite differences of every parameter, hybrid (M * - E inner layers)", "[mhc][mtp][mhc_hybrid]") {
  // One depth of 4 wrapped layers: e_proj, h_proj, 4 × (mapping_proj, alpha_res), hc_head_*.
  CHECK(check_all_gradients(hybrid_cfg("M*E-/M*-E", true)) == 2 + 8 + 3);
  CHECK(check_all_gradients(hybrid_cfg("*-/*-/*-", false)) == 2 * (2 + 4));
}

TEST_CASE("mhc mtp: detached heads leave the trunk's gradients to the LM loss", "[mhc][mtp]") {
  ModelConfig cfg = gpt_cfg(true);
  cfg.mtp_detach_heads = true;
  auto m = build(cfg);
  m->init_parameters(3);
  perturb(*m, 9);
  const Batch batch = test::fixed_batch(kB, kS, kVocab);
  const auto with = test::mtp_ref::grads_with_mtp_weight(*m, batch, 1.0);
  const auto without = test::mtp_ref::grads_with_mtp_weight(*m, batch, 0.0);
  int trunk = 0, heads = 0;
  for (const auto& [name, g] : with) {
    INFO(name);
    if (name.rfind("mtp.", 0) == 0) {
      heads += g != without.at(name);
    } else {
      CHECK(g == without.at(name));
      ++trunk;
    }
  }
  CHECK(trunk > 10);
  CHECK(heads > 10);
}

TEST_CASE("mhc mtp: full recompute of the depths is bit-identical (GPT, hybrid, f32, dropout)", "[mhc][mtp][recompute]") {
  for (const bool hybrid : {false, true}) {
    INFO((hybrid ? "hybrid" : "gpt"));
    auto run = [&](bool recompute) {
      ModelConfig cfg = hybrid ? hybrid_cfg("M*E-/M*E/M*E", true) : gpt_cfg(true);
      if (recompute) {
        cfg.recompute_granularity = RecomputeGranularity::Full;
        cfg.recompute_method = RecomputeMethod::Uniform;
        cfg.recompute_num_layers = 1;
      }
      auto m = build(cfg, DType::F32);
      m->init_parameters(7);
      for (Parameter* p : m->parameters()) p->main_grad.zero_();
      std::vector<Vec> out;
      std::vector<std::unique_ptr<ForwardContext>> ctx;
      std::vector<ForwardOutput> fwd;
      for (int64_t mb = 0; mb < 2; ++mb) {  // two micro-batches in flight, as a pipeline schedule
        ctx.push_back(m->make_context(1, mb, true));
        fwd.push_back(m->forward_pass(*ctx.back(), test::fixed_batch(kB, kS, kVocab)));
        for (const NamedLoss& l : fwd.back().losses) out.push_back(l.value.to_vector());
      }
      for (int64_t mb = 0; mb < 2; ++mb) {
        BackwardInput in;
        in.loss_grads = loss_weights(fwd[static_cast<size_t>(mb)], 60 + static_cast<uint64_t>(mb));
        for (Tensor& t : in.loss_grads) t = t.to(DType::F32);
        m->backward_pass(*ctx[static_cast<size_t>(mb)], in);
      }
      for (Parameter* p : m->parameters()) out.push_back(p->main_grad.to_vector());
      return out;
    };
    const std::vector<Vec> ref = run(false), got = run(true);
    REQUIRE(ref.size() == got.size());
    for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == ref[i]);  // bitwise
  }
}

TEST_CASE("mhc mtp: checkpoint round trip of the MTP parameters, generation ignores the depths", "[mhc][mtp]") {
  const ModelConfig cfg = gpt_cfg(true);
  auto a = build(cfg), other = build(cfg);
  a->init_parameters(3);
  perturb(*a, 11);
  other->init_parameters(99);
  test::checkpoint_round_trip(a->parameters(), other->parameters(), "mhc_mtp", 2);
  const Batch batch = test::fixed_batch(kB, kS, kVocab);
  CHECK(losses(*other, batch) == losses(*a, batch));
  CHECK(by_name(*other).at("mtp.layers.1.hc_head_fn")->value.to_vector() ==
        by_name(*a).at("mtp.layers.1.hc_head_fn")->value.to_vector());
  // Generation: the same decoder without MTP gives the same logits (the depths are not run).
  ModelConfig plain = cfg;
  plain.mtp_num_layers.reset();
  auto p = build(plain);
  auto pa = by_name(*a);
  for (Parameter* q : p->parameters()) q->value.copy_(pa.at(q->name)->value);
  auto& ga = dynamic_cast<GPTModel&>(*a);
  auto& gp = dynamic_cast<GPTModel&>(*p);
  CHECK(test::max_abs_diff(ga.logits_for(batch.tokens, nullptr, 0), gp.logits_for(batch.tokens, nullptr, 0)) == 0.0);
}

TEST_CASE("mhc mtp: strata plan counts e_proj, h_proj, the inner sites and hc_head_* per depth exactly",
          "[mhc][mtp][memory_plan]") {
  const std::vector<std::string> common = {"model.enable_hyper_connections=true", "model.position_embedding_type=rope",
                                           "model.hidden_size=16", "model.num_attention_heads=4",
                                           "model.vocab_size=50", "model.make_vocab_size_divisible_by=8",
                                           "model.num_residual_streams=3", "model.add_bias_linear=false",
                                           "model.mamba_head_dim=8", "model.mamba_state_dim=4",
                                           "model.mamba_num_groups=2", "model.num_experts=4",
                                           "model.moe_ffn_hidden_size=8", "model.moe_router_topk=2"};
  const std::vector<std::vector<std::string>> variants = {
      {"model.num_layers=2", "model.mtp_num_layers=2"},
      {"model.num_layers=2", "model.mtp_num_layers=2", "model.mtp_use_repeated_layer=true"},
      {"model.num_layers=2", "model.mtp_num_layers=1", "model.mhc_learned_output_contract=false"},
      {"model.hybrid_layer_pattern='M*E-/M*E/M*E'"},
      {"model.hybrid_layer_pattern='M*-/*-'", "model.mhc_learned_output_contract=false"},
  };
  for (const auto& v : variants) {
    std::vector<std::string> o = common;
    o.insert(o.end(), v.begin(), v.end());
    const ResolvedConfig cfg = test::tiny_config(o);
    auto model = make_model(cfg, Device::cpu());
    int64_t built = 0;
    for (Parameter* p : model->parameters()) built += p->value.numel();
    INFO(v.front() << " " << v.back());
    CHECK(plan_layout(cfg).model_parameters == built);
    CHECK(model_parameter_total(cfg.model) == built);
  }
}

TEST_CASE("mhc mtp: the config accepts mHC with MTP (GPT and hybrid '/' patterns)", "[mhc][mtp][config]") {
  auto err = [](const std::vector<std::string>& extra) {
    std::vector<std::string> o = {"model.enable_hyper_connections=true", "model.position_embedding_type=rope"};
    o.insert(o.end(), extra.begin(), extra.end());
    try {
      test::tiny_config(o);
    } catch (const config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err({"model.mtp_num_layers=2"}) == "(no error)");
  CHECK(err({"model.mtp_num_layers=2", "model.mtp_use_repeated_layer=true", "model.mtp_detach_heads=true"}) ==
        "(no error)");
  CHECK(err({"model.hybrid_layer_pattern='M*-/*-'"}) == "(no error)");
}

}  // namespace strata

namespace strata {
namespace {
int64_t peak_bytes(const ResolvedConfig& cfg) { return test::peak_training_bytes(cfg, 50); }
}  // namespace

TEST_CASE("mhc mtp: the plan's MTP activations are within 5% of the allocator's peak increase (plain, mHC, full recompute)", "[mhc][mtp][memory_plan]") {
  for (const bool mhc : {true, false}) {
  const std::vector<std::string> common = {mhc ? "model.enable_hyper_connections=true" : "model.num_residual_streams=4", "model.position_embedding_type=rope",
                                           "model.hidden_size=128", "model.num_attention_heads=2",
                                           "model.vocab_size=50", "model.make_vocab_size_divisible_by=8",
                                           "model.num_residual_streams=4", "model.num_layers=2",
                                           "model.seq_length=16", "model.max_position_embeddings=16",
                                           "training.micro_batch_size=4", "training.global_batch_size=4"};
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"model.recompute_granularity=full",
                                                             "model.recompute_method=uniform",
                                                             "model.recompute_num_layers=1"}}) {
    std::vector<std::string> a = common, b = common;
    a.insert(a.end(), extra.begin(), extra.end());
    b.insert(b.end(), extra.begin(), extra.end());
    b.push_back("model.mtp_num_layers=2");
    const ResolvedConfig without = test::tiny_config(a), with = test::tiny_config(b);
    auto planned = [](const ResolvedConfig& c) { return plan_layout(c).stages.at(0).memory.activations_configured; };
    const double measured = static_cast<double>(peak_bytes(with) - peak_bytes(without));
    const double plan = static_cast<double>(planned(with) - planned(without));
    std::printf("  %s MTP (2 depths%s): measured %.0f B, planned %.0f B\n", mhc ? "mHC" : "plain", extra.empty() ? "" : ", full recompute",
                measured, plan);
    CHECK(measured > 0);
    CHECK(std::abs(plan - measured) <= 0.05 * measured);
  }
  }
}

}  // namespace strata
