// The router_diagnostic_sums site (models/layers/moe/router_observation.h): normalising the sums
// of whole sequences gives the router_diagnostics tensor (same routing) on several router
// configurations; the sums of a sequence split along s are the sums of its parts (bias channel
// equal); the kind is emitted under split sequences, where router_diagnostics is refused.
// Reference: megatron/core/transformer/moe/router_diagnostics.py.
#include <catch2/catch.hpp>

#include "core/observe.h"
#include "models/layers/moe/router_observation.h"
#include "models/layers/moe/routing.h"
#include "tests/unit/moe_test_config.h"
#include "tests/unit/test_helpers.h"

using namespace strata;
using namespace strata::layers::moe;

namespace {

struct Case {
  const char* what;
  ResolvedModelConfig cfg;
  bool bias = false, padding = false;
};

std::vector<Case> cases() {
  ModelConfig softmax = test::moe_model_config(6, 2);
  ModelConfig sigmoid = softmax, capacity = softmax, sqrtsoftplus = softmax;
  sigmoid.moe_router_score_function = MoeScoreFunction::Sigmoid;
  sigmoid.moe_router_enable_expert_bias = true;
  capacity.moe_expert_capacity_factor = 0.5;
  sqrtsoftplus.moe_router_score_function = MoeScoreFunction::SqrtSoftplus;
  return {{"softmax", ResolvedModelConfig(softmax)},
          {"sigmoid with expert bias", ResolvedModelConfig(sigmoid), true},
          {"capacity dropping", ResolvedModelConfig(capacity)},
          {"padding and sqrtsoftplus", ResolvedModelConfig(sqrtsoftplus), false, true}};
}

struct Routed {
  Tensor logits, map, bias, padding;
  int64_t s, b;
};

Routed route_case(const Case& c, int64_t s, int64_t b, uint64_t seed) {
  const int64_t T = s * b, E = *c.cfg->num_experts;
  Routed r{test::random_tensor({T, E}, seed, -2.0, 2.0), {}, {}, {}, s, b};
  if (c.bias) r.bias = Tensor::from_vector({0.1, -0.2, 0.0, 0.3, -0.05, 0.2}, {E}, DType::F32);
  if (c.padding) {
    std::vector<uint8_t> pad(static_cast<size_t>(T), 0);
    for (int64_t i = s - 2; i < s; ++i) pad[static_cast<size_t>(i * b + 0)] = 1;  // sequence 0 ends padded
    for (int64_t i = 0; i < s; ++i) pad[static_cast<size_t>(i * b + 2)] = 1;      // sequence 2 all padding
    r.padding = Tensor::from_data(pad, {T});
  }
  RoutingInput in;
  in.logits = r.logits;
  in.expert_bias = r.bias;
  in.padding_mask = r.padding;
  in.seq_length = s;
  in.batch = b;
  GlobalAuxLossTracker tracker;
  tracker.tokens_per_expert.assign(static_cast<size_t>(E), 0.0);
  r.map = route(c.cfg, in, RouterGroups{}, &tracker, nullptr).routing_map;
  return r;
}

// Rows [from, to) of the sequence positions of an [s·b, …] tensor in [s, b] order.
Tensor positions(const Tensor& t, int64_t from, int64_t to, int64_t b) {
  if (!t.defined()) return t;
  return t.narrow(0, from * b, (to - from) * b).contiguous();
}

}  // namespace

TEST_CASE("router diagnostic sums: normalised whole-sequence sums are the router_diagnostics tensor", "[observe]") {
  const int64_t s = 8, b = 3;
  uint64_t seed = 40;
  for (const Case& c : cases()) {
    INFO(c.what);
    const Routed r = route_case(c, s, b, ++seed);
    const Tensor sums = router_diagnostic_sums(c.cfg, r.logits, r.map, r.bias, s, b, r.padding);
    REQUIRE(sums.shape() == Shape{b, 8, 6});
    const std::vector<double> got = normalize_router_diagnostic_sums(sums).to_vector(),
                              want = router_diagnostics(c.cfg, r.logits, r.map, r.bias, s, b, r.padding).to_vector();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("sequence " << i / 42 << " channel " << (i / 6) % 7 << " expert " << i % 6);
      const int64_t ch = static_cast<int64_t>((i / 6) % 7);
      if (ch == 0 || ch == 6)  // Σ rounded to f32 before the division: one f32 rounding apart
        CHECK(got[i] == Approx(want[i]).epsilon(2e-7).margin(1e-30));
      else
        CHECK(got[i] == want[i]);  // counts, bias, ratios of exact counts
    }
    if (c.padding) CHECK(sums.to_vector()[2 * 48 + 5 * 6] == 0.0);  // sequence 2: no valid token
    if (c.cfg->moe_expert_capacity_factor) {
      const std::vector<double> x = sums.to_vector();
      double aux = 0, actual = 0;
      for (int64_t j = 0; j < b; ++j)
        for (int64_t e = 0; e < 6; ++e) aux += x[j * 48 + 6 + e], actual += x[j * 48 + 12 + e];
      CHECK(actual < aux);  // pairs were dropped
    }
  }
}

TEST_CASE("router diagnostic sums: a sequence split along s sums to the whole (bias equal)", "[observe]") {
  const int64_t s = 8, b = 3;
  uint64_t seed = 70;
  for (const Case& c : cases()) {
    INFO(c.what);
    const Routed r = route_case(c, s, b, ++seed);
    const std::vector<double> whole = router_diagnostic_sums(c.cfg, r.logits, r.map, r.bias, s, b, r.padding).to_vector();
    std::vector<double> parts(whole.size(), 0.0), bias_seen(whole.size(), 0.0);
    for (auto [from, to] : {std::pair<int64_t, int64_t>{0, 3}, {3, 3}, {3, 8}}) {  // one empty shard
      const std::vector<double> p =
          router_diagnostic_sums(c.cfg, positions(r.logits, from, to, b), positions(r.map, from, to, b), r.bias,
                                 to - from, b, positions(r.padding, from, to, b))
              .to_vector();
      for (size_t i = 0; i < p.size(); ++i) {
        if ((i / 6) % 8 == 3)
          bias_seen[i] = p[i];
        else
          parts[i] += p[i];
      }
    }
    for (size_t i = 0; i < whole.size(); ++i) {
      INFO("sequence " << i / 48 << " channel " << (i / 6) % 8 << " expert " << i % 6);
      if ((i / 6) % 8 == 3)
        CHECK(bias_seen[i] == whole[i]);
      else
        CHECK(parts[i] == Approx(whole[i]).epsilon(1e-6).margin(1e-6));
    }
  }
}

TEST_CASE("router diagnostic sums: the kind's name and emission under split sequences", "[observe]") {
  CHECK(std::string(source_kind_name(SourceKind::RouterDiagnosticSums)) == "router_diagnostic_sums");
  CHECK(source_kind_from_name("router_diagnostic_sums") == SourceKind::RouterDiagnosticSums);
  struct Recorder : Observer {
    std::vector<std::string> names;
    std::optional<int> batch_dim, tp_dim;
    void on_tensor(const Observation& o) override {
      names.emplace_back(o.name);
      batch_dim = o.batch_dim;
      tp_dim = o.tp_shard_dim;
    }
  } rec;
  const Case c = cases()[0];
  const Routed r = route_case(c, 4, 2, 5);
  RoutingInput in;
  in.logits = r.logits;
  in.seq_length = 4;
  in.batch = 2;
  GlobalAuxLossTracker tracker;
  tracker.tokens_per_expert.assign(6, 0.0);
  const RoutingOutput out = route(c.cfg, in, RouterGroups{}, &tracker, nullptr);
  RouterObservation ob;
  ob.owner = "decoder.layers.1.mlp.router";
  ob.gated = &r.logits;
  ob.routing = &out;
  ob.s = 4;
  ob.b = 2;
  ob.training = true;
  ob.sequence_parallel = true;
  ob.sequences_split = true;  // tp × cp > 1
  {
    CaptureScope scope(rec, {SourceKind::RouterDiagnosticSums});
    observe_router_outputs(c.cfg, ob);
  }
  REQUIRE(rec.names == std::vector<std::string>{"router_diagnostic_sums"});
  CHECK(rec.batch_dim == 0);
  CHECK_FALSE(rec.tp_dim.has_value());
  {
    CaptureScope scope(rec, {SourceKind::RouterDiagnostics});
    CHECK_THROWS_WITH(observe_router_outputs(c.cfg, ob),
                      Catch::Contains("router_diagnostics needs whole local sequences"));
  }
  ob.training = false;  // evaluation: not emitted
  rec.names.clear();
  {
    CaptureScope scope(rec, {SourceKind::RouterDiagnosticSums});
    observe_router_outputs(c.cfg, ob);
  }
  CHECK(rec.names.empty());
}
