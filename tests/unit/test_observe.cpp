// Tensor observation (core/observe.h) and its sites: scopes nest and restore, suspended scopes see
// nothing, the fan-out routes kinds; every source kind reaches the observer from a GPT + MoE model
// with the right owner (global layer names), name, shape and dims (training, evaluation and
// generation forwards); residual_contribution is output − input; the router tensors against
// direct f64 computations (gating, normalised scores, top-k probabilities, and the seven
// diagnostics channels with padding and dropped tokens); with no observer nothing is computed
// (allocation counts) and the losses are bit-identical.
// Reference: megatron/core/tensor_observation.py, router_diagnostics.py.
#include <catch2/catch.hpp>

#include <cfloat>
#include <map>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/observe.h"
#include "models/gpt/gpt_model.h"
#include "models/layers/moe/moe_layer.h"
#include "models/layers/moe/router_observation.h"
#include "moe_test_config.h"
#include "test_helpers.h"

namespace strata {
namespace {

struct Seen {
  std::string owner, name;
  SourceKind kind;
  Tensor tensor;  // a copy (the observed one is valid during the call only)
  std::optional<int> tp, seq, batch;
};

struct Recorder : Observer {
  std::vector<Seen> seen;
  void on_tensor(const Observation& o) override {
    seen.push_back({std::string(o.owner), std::string(o.name), o.kind, o.tensor.clone(), o.tp_shard_dim,
                    o.sequence_dim, o.batch_dim});
  }
  const Seen* find(const std::string& owner, const std::string& name) const {
    for (const Seen& s : seen)
      if (s.owner == owner && s.name == name) return &s;
    return nullptr;
  }
};

TEST_CASE("observe: scopes nest and restore, suspend hides everything, kinds filter", "[observe]") {
  Recorder a, b;
  const Tensor t = Tensor::full({2}, 1.0, DType::F32);
  CHECK_FALSE(is_observing(SourceKind::OutputLogits));
  observe("x", "n", SourceKind::OutputLogits, t);  // no scope: nothing
  {
    CaptureScope outer(a, {SourceKind::OutputLogits});
    CHECK(is_observing(SourceKind::OutputLogits));
    CHECK_FALSE(is_observing(SourceKind::RouterLogits));
    observe("x", "1", SourceKind::OutputLogits, t);
    observe("x", "ignored", SourceKind::RouterLogits, t);
    {
      CaptureScope inner(b, {SourceKind::RouterLogits});  // replaces, does not add
      CHECK_FALSE(is_observing(SourceKind::OutputLogits));
      observe("x", "2", SourceKind::RouterLogits, t);
      {
        SuspendScope quiet;
        CHECK_FALSE(is_observing(SourceKind::RouterLogits));
        observe("x", "hidden", SourceKind::RouterLogits, t);
      }
      observe("x", "3", SourceKind::RouterLogits, t);
    }
    observe("x", "4", SourceKind::OutputLogits, t);  // the outer observer is back
  }
  CHECK_FALSE(is_observing(SourceKind::OutputLogits));
  REQUIRE(a.seen.size() == 2);
  CHECK(a.seen[0].name == "1");
  CHECK(a.seen[1].name == "4");
  REQUIRE(b.seen.size() == 2);
  CHECK(b.seen[0].name == "2");
  CHECK(b.seen[1].name == "3");
}

TEST_CASE("observe: a capture opened inside a suspended region stays suspended", "[observe]") {
  // Megatron keeps the suspension in its own context variable: capturing does not lift it.
  Recorder a, b;
  const Tensor t = Tensor::full({2}, 1.0, DType::F32);
  {
    CaptureScope outer(a, {SourceKind::OutputLogits});
    {
      SuspendScope quiet;
      {
        CaptureScope inner(b, {SourceKind::OutputLogits});
        CHECK_FALSE(is_observing(SourceKind::OutputLogits));
        observe("x", "hidden", SourceKind::OutputLogits, t);
      }
      CHECK_FALSE(is_observing(SourceKind::OutputLogits));  // closing the capture keeps the suspension
      observe("x", "hidden", SourceKind::OutputLogits, t);
    }
    CHECK(is_observing(SourceKind::OutputLogits));
    observe("x", "1", SourceKind::OutputLogits, t);
    {
      CaptureScope inner(b, {SourceKind::OutputLogits});
      {
        SuspendScope quiet;
        observe("x", "hidden", SourceKind::OutputLogits, t);
      }
      observe("x", "2", SourceKind::OutputLogits, t);
    }
  }
  REQUIRE(a.seen.size() == 1);
  CHECK(a.seen[0].name == "1");
  REQUIRE(b.seen.size() == 1);
  CHECK(b.seen[0].name == "2");
}

TEST_CASE("observe: the fan-out gives each observer its kinds, kind names round-trip", "[observe]") {
  Recorder a, b;
  ObserverFanout fan;
  fan.add(a, {SourceKind::RouterLogits});
  fan.add(b, {SourceKind::RouterLogits, SourceKind::OutputLogits});
  CHECK(fan.kinds() == SourceKinds({SourceKind::RouterLogits, SourceKind::OutputLogits}));
  const Tensor t = Tensor::full({1}, 2.0, DType::F32);
  {
    CaptureScope scope(fan, fan.kinds());
    observe("o", "r", SourceKind::RouterLogits, t);
    observe("o", "l", SourceKind::OutputLogits, t);
  }
  CHECK(a.seen.size() == 1);
  CHECK(b.seen.size() == 2);
  for (int i = 0; i < kNumSourceKinds; ++i) {
    const auto k = static_cast<SourceKind>(i);
    CHECK(source_kind_from_name(source_kind_name(k)) == k);
  }
  CHECK(std::string(source_kind_name(SourceKind::AttentionLogitMax)) == "attention_logit_max");
  CHECK_FALSE(source_kind_from_name("").has_value());
  CHECK(std::string(source_kind_name(SourceKind::ResidualAccumulator)) == "residual_accumulator");
  CHECK(std::string(source_kind_name(SourceKind::RouterDiagnostics)) == "router_diagnostics");
  CHECK_FALSE(source_kind_from_name("residual_in").has_value());
}

// A 2-layer GPT with an MoE layer 1 (f64, 4 experts, top-2, capacity 0.5 so pairs drop).
ModelConfig moe_model_config() {
  ModelConfig m = test::tiny_moe_model_config();
  m.moe_expert_capacity_factor = 0.5;
  m.moe_layer_freq = {"[0, 1]"};
  return m;
}

std::unique_ptr<GPTModel> f64_model(const ModelConfig& cfg) {
  GPTModelOptions o;
  o.dtype = DType::F64;
  auto m = std::make_unique<GPTModel>(cfg, o);
  m->init_parameters(5);
  return m;
}

TEST_CASE("observe: every site of a GPT + MoE forward, with owners, shapes and dims", "[observe]") {
  auto model = f64_model(moe_model_config());
  const Batch batch = test::fixed_batch(2, 6, 24);
  Recorder rec;
  {
    CaptureScope scope(rec, SourceKinds::all());
    auto ctx = model->make_context(1, 0, true);
    model->forward_pass(*ctx, batch);
  }
  const Shape act{6, 2, 8};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "decoder.layers." + std::to_string(i);
    for (const char* n : {"residual_accumulator", "residual_contribution"}) {
      const Seen* s = rec.find(l, n);
      REQUIRE(s != nullptr);
      CHECK(s->tensor.shape() == act);
      CHECK(!s->tp.has_value());
      CHECK(s->seq == 0);
      CHECK(s->batch == 1);
    }
  }
  // contribution of layer 0 = accumulator of layer 1 − accumulator of layer 0.
  const std::vector<double> a0 = rec.find("decoder.layers.0", "residual_accumulator")->tensor.to_vector(),
                            a1 = rec.find("decoder.layers.1", "residual_accumulator")->tensor.to_vector(),
                            c0 = rec.find("decoder.layers.0", "residual_contribution")->tensor.to_vector();
  for (size_t i = 0; i < a0.size(); ++i) CHECK(c0[i] == Approx(a1[i] - a0[i]).margin(1e-15));
  const Seen* logits = rec.find("output_layer", "output_logits");
  REQUIRE(logits != nullptr);
  CHECK(logits->tensor.shape() == Shape{6, 2, 24});
  CHECK(logits->tp == 2);
  const std::string router = "decoder.layers.1.mlp.router";
  CHECK(rec.find("decoder.layers.0.mlp.router", "router_logits") == nullptr);  // layer 0 is dense
  const std::map<std::string, Shape> shapes = {{"router_input", act},           {"router_logits", {6, 2, 4}},
                                               {"router_scores", {6, 2, 4}},    {"router_topk_probs", {6, 2, 4}},
                                               {"router_top_indices", {12, 2}}, {"router_top_kept", {12, 2}},
                                               {"router_diagnostics", {2, 7, 4}}};
  for (const auto& [name, shape] : shapes) {
    INFO(name);
    const Seen* s = rec.find(router, name);
    REQUIRE(s != nullptr);
    CHECK(s->tensor.shape() == shape);
  }
  // The router's sites against direct computations: logits = W·x, scores = softmax(logits),
  // top-k probabilities at the selected experts (dropped pairs included: before dropping).
  auto* moe = dynamic_cast<layers::moe::MoELayer*>(&model->layer(1).mlp_slot());
  REQUIRE(moe != nullptr);
  const std::vector<double> x = rec.find(router, "router_input")->tensor.to_vector(),
                            w = moe->router.weight.value.to_vector(),
                            lg = rec.find(router, "router_logits")->tensor.to_vector(),
                            sc = rec.find(router, "router_scores")->tensor.to_vector(),
                            tp = rec.find(router, "router_topk_probs")->tensor.to_vector(),
                            idx = rec.find(router, "router_top_indices")->tensor.to_vector(),
                            kept = rec.find(router, "router_top_kept")->tensor.to_vector();
  int64_t dropped = 0;
  for (int64_t t = 0; t < 12; ++t) {
    double z = 0;
    std::vector<double> l(4);
    for (int64_t e = 0; e < 4; ++e) {
      for (int64_t h = 0; h < 8; ++h) l[e] += w[e * 8 + h] * x[t * 8 + h];
      CHECK(lg[t * 4 + e] == Approx(l[e]).epsilon(1e-12));
      z += std::exp(l[e]);
    }
    double top_sum = 0;
    for (int64_t s = 0; s < 2; ++s) top_sum += std::exp(l[static_cast<size_t>(idx[t * 2 + s])]);
    for (int64_t e = 0; e < 4; ++e) {
      CHECK(sc[t * 4 + e] == Approx(std::exp(l[e]) / z).epsilon(1e-6));  // f32
      const bool selected = idx[t * 2] == e || idx[t * 2 + 1] == e;
      CHECK(tp[t * 4 + e] == Approx(selected ? std::exp(l[e]) / top_sum : 0.0).margin(1e-12));  // post-softmax top-k
    }
    dropped += (kept[t * 2] == 0) + (kept[t * 2 + 1] == 0);
  }
  CHECK(dropped > 0);  // capacity 0.5: ceil(12·2/4·0.5) = 3 per expert of 24 pairs
}

// The seven channels written out from their definitions, in f64.
std::vector<double> diagnostics_reference(const std::vector<double>& logits, const std::vector<uint8_t>& actual,
                                          const std::vector<uint8_t>& pad, const std::vector<double>& bias, int64_t s,
                                          int64_t b, int64_t E, int64_t k) {
  std::vector<double> out(static_cast<size_t>(b * 7 * E), 0.0);
  for (int64_t j = 0; j < b; ++j) {
    double valid = 0, aux_total = 0, act_total = 0, both = 0, margins = 0, boundaries = 0;
    std::vector<double> mean(E), aux_n(E), act_n(E);
    for (int64_t i = 0; i < s; ++i) {
      const int64_t t = i * b + j;
      if (pad[t]) continue;
      valid += 1;
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += std::exp(logits[t * E + e]);
      std::vector<double> p(E);
      for (int64_t e = 0; e < E; ++e) p[e] = std::exp(logits[t * E + e]) / z;
      std::vector<int64_t> order(E);
      for (int64_t e = 0; e < E; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(), [&](int64_t u, int64_t v) { return p[u] > p[v]; });
      std::vector<bool> sel(E, false);
      for (int64_t q = 0; q < k; ++q) sel[order[q]] = true;
      double floor = 1e300, ceil = -1e300;
      for (int64_t e = 0; e < E; ++e) {
        mean[e] += p[e];
        aux_n[e] += sel[e];
        act_n[e] += actual[t * E + e];
        aux_total += sel[e];
        act_total += actual[t * E + e];
        both += sel[e] && actual[t * E + e];
        if (sel[e]) floor = std::min(floor, p[e]);
        else ceil = std::max(ceil, p[e]);
      }
      boundaries += 1;  // k < E: every valid token has a boundary
      margins += std::max(floor - ceil, 0.0) / std::max(floor, static_cast<double>(FLT_EPSILON));
    }
    double* o = &out[j * 7 * E];
    for (int64_t e = 0; e < E; ++e) {
      o[e] = mean[e] / std::max(valid, 1.0);
      o[E + e] = aux_n[e] / std::max(aux_total, 1.0);
      o[2 * E + e] = act_n[e] / std::max(act_total, 1.0);
      o[3 * E + e] = bias.empty() ? 0.0 : bias[e];
    }
    o[4 * E] = both / std::max(aux_total, 1.0);
    o[5 * E] = valid;
    o[6 * E] = margins / std::max(boundaries, 1.0);
  }
  return out;
}

TEST_CASE("observe: router diagnostics channels against a direct f64 computation, padding and drops", "[observe]") {
  const ResolvedModelConfig o(test::moe_model_config(5, 2));
  const int64_t s = 4, b = 3, E = 5, T = s * b;
  const Tensor logits = test::random_tensor({T, E}, 17, -2.0, 2.0).to(DType::F64);
  std::vector<uint8_t> actual(static_cast<size_t>(T * E), 0), pad(static_cast<size_t>(T), 0);
  for (int64_t t = 0; t < T; ++t) {  // an "actual" map that differs from the aux top-k (drops, other picks)
    actual[static_cast<size_t>(t * E + (t % E))] = 1;
    if (t % 3 == 0) actual[static_cast<size_t>(t * E + ((t + 2) % E))] = 1;
  }
  pad[2] = pad[7] = pad[11] = 1;  // padding in two sequences (tokens t = i·b + j)
  const std::vector<double> bias = {0.1, -0.2, 0.0, 0.3, 0.05};
  const Tensor got = layers::moe::router_diagnostics(
      o, logits, Tensor::from_data(actual, {T, E}), Tensor::from_vector(bias, {E}, DType::F32), s, b,
      Tensor::from_data(pad, {T}));
  REQUIRE(got.shape() == Shape{b, 7, E});
  const std::vector<double> want = diagnostics_reference(logits.to_vector(), actual, pad, bias, s, b, E, 2);
  const std::vector<double> g = got.to_vector();
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("sequence " << i / (7 * E) << " channel " << (i / E) % 7 << " expert " << i % E);
    CHECK(g[i] == Approx(want[i]).epsilon(1e-6).margin(1e-7));
  }
}

TEST_CASE("observe: evaluation and generation forwards are observed, eval has no diagnostics", "[observe]") {
  auto model = f64_model(moe_model_config());
  Recorder rec;
  {
    CaptureScope scope(rec, SourceKinds::all());
    auto ctx = model->make_context(1, 0, /*training=*/false);
    model->forward_pass(*ctx, test::fixed_batch(2, 6, 24));
  }
  CHECK(rec.find("decoder.layers.1.mlp.router", "router_logits") != nullptr);
  CHECK(rec.find("decoder.layers.1.mlp.router", "router_diagnostics") == nullptr);  // training only
  rec.seen.clear();
  {
    CaptureScope scope(rec, {SourceKind::OutputLogits, SourceKind::RouterTopIndices});
    InferenceCache cache = model->make_inference_cache(1, 6);
    model->logits_for(Tensor::from_data(std::vector<int64_t>{1, 2, 3}, {1, 3}), &cache, 0);
    model->logits_for(Tensor::from_data(std::vector<int64_t>{4}, {1, 1}), &cache, 3);
  }
  int logits = 0, routes = 0;
  for (const Seen& s : rec.seen) {
    logits += s.name == "output_logits";
    routes += s.name == "router_top_indices";
  }
  CHECK(logits == 2);  // the prompt, then one decode step
  CHECK(routes == 2);
}

TEST_CASE("observe: sites off compute nothing, and the losses are bit-identical", "[observe]") {
  auto model = f64_model(moe_model_config());
  const Batch batch = test::fixed_batch(2, 6, 24);
  auto run = [&](Observer* obs, SourceKinds kinds, int64_t& allocs) {
    const int64_t before = memory_stats(Device::cpu()).num_allocs;
    std::vector<double> losses;
    if (obs) {
      CaptureScope scope(*obs, kinds);
      auto ctx = model->make_context(1, 0, true);
      for (const NamedLoss& l : model->forward_pass(*ctx, batch).losses) losses.push_back(l.value.to_vector()[0]);
    } else {
      auto ctx = model->make_context(1, 0, true);
      for (const NamedLoss& l : model->forward_pass(*ctx, batch).losses) losses.push_back(l.value.to_vector()[0]);
    }
    allocs = memory_stats(Device::cpu()).num_allocs - before;
    return losses;
  };
  int64_t warm = 0, off = 0, off2 = 0, residual = 0, scores = 0;
  run(nullptr, {}, warm);  // first forward: the model's reused buffers are allocated
  const std::vector<double> base = run(nullptr, {}, off);
  CHECK(run(nullptr, {}, off2) == base);
  CHECK(off2 == off);  // the count is reproducible
  struct Drop : Observer {
    void on_tensor(const Observation&) override {}
  } drop;
  // Observing the contribution allocates it (one tensor per layer); observing the scores computes
  // them: so the counter sees what sites build, and with sites off none of it happens.
  CHECK(run(&drop, {SourceKind::ResidualContribution}, residual) == base);
  CHECK(residual > off);
  CHECK(run(&drop, {SourceKind::RouterScores}, scores) == base);
  CHECK(scores > off);
  int64_t accumulator = 0;  // passing an existing tensor allocates nothing
  CHECK(run(&drop, {SourceKind::ResidualAccumulator, SourceKind::RouterInput, SourceKind::RouterTopIndices},
            accumulator) == base);
  CHECK(accumulator == off);
}

}  // namespace
}  // namespace strata
