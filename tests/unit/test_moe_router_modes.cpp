// MoE TopKRouter (models/layers/moe/): jitter layout independence, forced balancing, expert-bias
// bookkeeping, inference routing, router dtypes, the router configs the model section refuses,
// losses over a 2-rank group, and the [T, k] backward (the reference and builders:
// moe_router_reference.h).
#include <optional>

#include "moe_router_reference.h"
#include "training/config/config.h"

using namespace strata;
using namespace strata::layers;
using namespace strata::layers::moe;
using namespace strata::test::router_ref;

TEST_CASE("router jitter is keyed by the global token: two halves draw what the whole draws", "[moe_router]") {
  ModelConfig o = router_model(8, 2);
  o.moe_input_jitter_eps = 0.2;
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter router("decoder.layers.0.mlp", ResolvedModelConfig(o), env);
  init_parameter(router.weight, 5);
  const int64_t s = 3, b = 4, H = 6, E = 8;
  const Tensor x = test::random_tensor({s, b, H}, 6);
  DropoutKeys keys;
  keys.seed = 7, keys.step = 2, keys.global_batch = b;
  RouterRun run;
  run.layer = 1, run.keys = &keys;
  const Vec whole = router.forward(x, run, nullptr).probs.to_vector();
  for (int64_t half = 0; half < 2; ++half) {
    DropoutKeys k2 = keys;
    k2.batch_offset = half * 2;
    RouterRun r2 = run;
    r2.keys = &k2;
    const Vec part = router.forward(x.narrow(1, half * 2, 2).contiguous(), r2, nullptr).probs.to_vector();
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t e = 0; e < E; ++e) REQUIRE(part[(i * 2 + j) * E + e] == whole[(i * b + half * 2 + j) * E + e]);
  }
  // the jitter does something, and another step draws other noise
  ModelConfig plain = o;
  plain.moe_input_jitter_eps.reset();
  TopKRouter no_jitter("decoder.layers.0.mlp", ResolvedModelConfig(plain), env);
  no_jitter.weight.value.copy_(router.weight.value);
  CHECK(no_jitter.forward(x, run, nullptr).probs.to_vector() != whole);
  DropoutKeys k3 = keys;
  k3.step = 3;
  RouterRun r3 = run;
  r3.keys = &k3;
  CHECK(router.forward(x, r3, nullptr).probs.to_vector() != whole);
  // inference routing has no jitter
  RouterRun inf = run;
  inf.mode = RoutingMode::Inference;
  CHECK(router.forward(x, inf, nullptr).probs.to_vector() == no_jitter.forward(x, inf, nullptr).probs.to_vector());
}

TEST_CASE("router forced load balancing: random logits, straight-through gradient", "[moe_router]") {
  ModelConfig o = router_model(8, 2);
  o.moe_router_force_load_balancing = true;
  LayerEnv env;
  env.dtype = DType::F64;
  const ResolvedModelConfig cfg(o);
  TopKRouter a("decoder.layers.0.mlp", cfg, env), b("decoder.layers.0.mlp", cfg, env);
  init_parameter(a.weight, 1);
  init_parameter(b.weight, 2);
  const Tensor x = test::random_tensor({4, 2, 6}, 3);
  RouterRun run;
  RouterState st;
  const RoutingOutput oa = a.forward(x, run, &st);
  CHECK(oa.probs.to_vector() == b.forward(x, run, nullptr).probs.to_vector());  // independent of W
  // the observed logits are the gating output x·Wᵀ, not the random ones
  const Tensor want = a.gating(x.reshape({8, 6}));
  CHECK(oa.logits.to_vector() == want.to_vector());
  // straight through: dx = d(logits) · W with d(logits) the routing backward of the random logits
  const Tensor R = test::random_tensor({8, 8}, 4);
  const Tensor dlogits = route_backward(st.routing, R, {});
  const Tensor dx = a.backward(st, R, {});
  const Vec dl = dlogits.to_vector(), w = a.weight.value.to_vector(), got = dx.to_vector();
  for (int64_t t = 0; t < 8; ++t)
    for (int64_t h = 0; h < 6; ++h) {
      double v = 0;
      for (int64_t e = 0; e < 8; ++e) v += dl[t * 8 + e] * w[e * 6 + h];
      REQUIRE(got[t * 6 + h] == Approx(v).margin(1e-14));
    }
}

TEST_CASE("router expert-bias bookkeeping: counts of the map, sign update, eval does not count", "[moe_router]") {
  ModelConfig o = router_model(8, 2);
  o.moe_router_score_function = MoeScoreFunction::Sigmoid;
  o.moe_router_enable_expert_bias = true;
  o.moe_router_bias_update_rate = 0.01;
  o.add_bias_linear = false;  // no trained logits bias (router.bias): the weight is the one parameter
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter router("decoder.layers.5.mlp", ResolvedModelConfig(o), env);
  init_parameter(router.weight, 9);
  std::vector<Parameter*> params, buffers;
  router.collect(params);
  router.collect_buffers(buffers);
  REQUIRE(params.size() == 1);
  CHECK(params[0]->name == "decoder.layers.5.mlp.router.weight");
  REQUIRE(buffers.size() == 1);
  CHECK(buffers[0]->name == "decoder.layers.5.mlp.router.expert_bias");
  CHECK(buffers[0]->value.dtype() == DType::F32);
  const Tensor x = test::random_tensor({4, 3, 6}, 10);
  RouterRun run;
  run.padding_mask = Tensor::from_vector({0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0}, {4, 3}, DType::U8);
  const RoutingOutput o1 = router.forward(x, run, nullptr);
  const RoutingOutput o2 = router.forward(x, run, nullptr);
  RouterRun eval = run;
  eval.mode = RoutingMode::Evaluation;
  router.forward(x, eval, nullptr);
  const Vec map = o1.routing_map.to_vector(), pad = run.padding_mask.to_vector();
  Vec direct(8, 0.0);
  for (int64_t t = 0; t < 12; ++t)
    for (int64_t e = 0; e < 8; ++e) direct[e] += pad[t] ? 0 : map[t * 8 + e];
  CHECK(o1.tokens_per_expert.to_vector() == direct);
  Vec twice = direct;
  for (double& v : twice) v *= 2;
  CHECK(router.local_tokens_per_expert().to_vector() == twice);
  // update: bias += rate · sign(mean − count)
  const Tensor counts = Tensor::from_vector({5, 1, 3, 3, 0, 4, 4, 4}, {8}, DType::F32);  // mean 3
  router.update_expert_bias(counts);
  const Vec bias = router.expert_bias.value.to_vector();
  const Vec want = {-0.01, 0.01, 0, 0, 0.01, -0.01, -0.01, -0.01};
  for (int e = 0; e < 8; ++e) CHECK(bias[e] == Approx(want[e]).margin(1e-9));
  CHECK(router.local_tokens_per_expert().to_vector() == Vec(8, 0.0));
}

TEST_CASE("router inference routing: no dropping, no losses, no counting", "[moe_router]") {
  ModelConfig o = router_model(8, 2);
  o.moe_router_score_function = MoeScoreFunction::Sigmoid;
  o.moe_router_enable_expert_bias = true;
  o.moe_expert_capacity_factor = 0.25;
  o.moe_aux_loss_coeff = {0.1};
  o.moe_z_loss_coeff = 0.1;
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter router("decoder.layers.0.mlp", ResolvedModelConfig(o), env);
  init_parameter(router.weight, 9);
  RouterRun run;
  run.mode = RoutingMode::Inference;
  const RoutingOutput out = router.forward(test::random_tensor({4, 3, 6}, 10), run, nullptr);
  CHECK(out.dropped.empty());
  CHECK(out.capacity == -1);
  CHECK(out.top_kept.to_vector() == Vec(24, 1.0));
  CHECK(out.losses.aux_loss == 0);
  CHECK(out.losses.z_loss == 0);
  CHECK(router.local_tokens_per_expert().to_vector() == Vec(8, 0.0));
  run.mode = RoutingMode::Training;  // the same options in training drop and have losses
  const RoutingOutput tr = router.forward(test::random_tensor({4, 3, 6}, 10), run, nullptr);
  CHECK(!tr.dropped.empty());
  CHECK(tr.losses.aux_loss > 0);
  CHECK(tr.losses.z_loss > 0);
}

TEST_CASE("router f32 dtype: probs follow the logits dtype and agree with f64", "[moe_router]") {
  ModelConfig o = router_model(8, 2);
  const Vec l = random_vec(15 * 8, 71);
  RoutingInput in;
  in.logits = Tensor::from_vector(l, {15, 8}, DType::F32);
  GlobalAuxLossTracker tr;
  const RoutingOutput out = route(ResolvedModelConfig(o), in, RouterGroups{}, &tr, nullptr);
  CHECK(out.probs.dtype() == DType::F32);
  const Ref r = ref_route(o, in.logits.to_vector(), 15, {});
  CHECK(test::max_abs_diff(out.probs, f64(r.probs, {15, 8})) < 1e-7);
}

namespace {

// The model section's checks as StrataConfig::validate runs them: the per-field validators (the
// field table), then the resolution's rules (ResolvedModelConfig). "" when the section is accepted,
// else the ConfigError's message.
std::string model_section_error(const ModelConfig& raw) {
  StrataConfig c;
  c.model = raw;
  try {
    StrataConfig::table().check_fields(c);
    const ResolvedModelConfig resolved(c.model);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("router configs the model section refuses name the fields", "[moe_router]") {
  auto fails_with = [](const ModelConfig& raw, const std::string& expected) {
    INFO(expected);
    const std::string what = model_section_error(raw);
    INFO("got: " << what);
    CHECK(what.rfind("ConfigError: " + expected, 0) == 0);
  };
  const ModelConfig o = router_model(8, 2);
  CHECK(model_section_error(o).empty());
  ModelConfig a = o;
  a.moe_router_enable_expert_bias = true;
  fails_with(a, "model.moe_router_enable_expert_bias: needs model.moe_router_score_function sigmoid or sqrtsoftplus");
  a = o;
  a.moe_router_topk = 1;
  fails_with(a, "model.moe_router_pre_softmax: must be true with model.moe_router_topk 1");
  a = o;
  a.moe_router_topk = 9;
  fails_with(a, "model.moe_router_topk: 9 exceeds model.num_experts (8)");
  a = o;
  a.moe_router_load_balancing_type = {"aux_loss", "seq_aux_loss"};
  a.moe_aux_loss_coeff = {0.1, 0.2, 0.3};
  fails_with(a, "model.moe_aux_loss_coeff: has 3 value(s) but model.moe_router_load_balancing_type has 2");
  a = o;
  a.moe_router_load_balancing_type = {"sinkhorn"};
  fails_with(a, "model.moe_router_load_balancing_type: 'sinkhorn' (Megatron's sinkhorn routing) is not implemented");
  a = o;
  a.moe_pad_expert_input_to_capacity = true;
  fails_with(a, "model.moe_pad_expert_input_to_capacity: needs model.moe_expert_capacity_factor");
  // No router is built from a refused section: its resolution throws first.
  LayerEnv env;
  ModelConfig bad = o;
  bad.moe_router_enable_expert_bias = true;
  CHECK_THROWS_AS(TopKRouter("decoder.layers.0.mlp", ResolvedModelConfig(bad), env), config::ConfigError);
}

namespace {

// Rank 0 of a 2-rank group whose peer's contributions the test supplies: all_reduce(sum) adds the
// peer tensor of the same size (the per-expert counts [E], or the per-sequence counts [b·E]).
class PeerCommunicator : public Communicator {
 public:
  std::vector<Vec> peers;
  int size() const override { return 2; }
  int rank() const override { return 0; }
  const char* backend() const override { return "peer"; }
  DeviceType device_type() const override { return DeviceType::CPU; }
  void all_reduce(Tensor& t, ReduceOp op) override {
    REQUIRE(op == ReduceOp::Sum);
    for (const Vec& p : peers)
      if (static_cast<int64_t>(p.size()) == t.numel()) {
        Vec v = t.to_vector();
        for (size_t i = 0; i < v.size(); ++i) v[i] += p[i];
        t.copy_(Tensor::from_vector(v, t.shape(), t.dtype()));
        return;
      }
    FAIL("no peer contribution of " << t.numel() << " values");
  }
  void reduce_scatter(const Tensor&, Tensor&, ReduceOp) override { FAIL("unused"); }
  void all_gather(const Tensor&, Tensor&) override { FAIL("unused"); }
  void all_gather_v(const Tensor&, Tensor&, const std::vector<int64_t>&) override { FAIL("unused"); }
  void all_to_all(const Tensor&, Tensor&) override { FAIL("unused"); }
  void all_to_all_v(const Tensor&, const std::vector<int64_t>&, Tensor&, const std::vector<int64_t>&) override {
    FAIL("unused");
  }
  void broadcast(Tensor&, int) override { FAIL("unused"); }
  void batch_send_recv(std::vector<PointToPoint>&) override { FAIL("unused"); }
  void barrier() override {}
  std::shared_ptr<Communicator> split(int, int) override { return nullptr; }
};

}  // namespace

TEST_CASE("router losses over a 2-rank group: the ranks' partial losses sum to the whole batch's", "[moe_router]") {
  // Sequence-sharded (tp×cp) halves: rank r holds rows [r·S/2, (r+1)·S/2) of every sequence.
  const int64_t S = 6, B = 3, E = 6, half = S / 2;
  ModelConfig o = router_model(E, 2);
  o.moe_router_load_balancing_type = {"aux_loss", "seq_aux_loss", "global_aux_loss"};
  o.moe_aux_loss_coeff = {0.01, 0.02, 0.03};
  o.moe_z_loss_coeff = 1e-3;
  const Vec l = random_vec(S * B * E, 81);
  const Vec l0(l.begin(), l.begin() + half * B * E), l1(l.begin() + half * B * E, l.end());
  const RoutingOutput whole = run_route(o, l, S, B, {}, {});
  // local counts of each half (softmax without bias or groups: the aux map is the routing map)
  auto counts = [&](const RoutingOutput& r, int64_t cols) {
    const Vec m = r.routing_map.to_vector();
    Vec c(cols, 0.0);
    for (size_t i = 0; i < m.size(); ++i) c[i % cols] += m[i];
    return c;
  };
  const RoutingOutput alone0 = run_route(o, l0, half, B, {}, {}), alone1 = run_route(o, l1, half, B, {}, {});
  RoutingLosses sum{};
  for (int r = 0; r < 2; ++r) {
    const RoutingOutput& peer = r == 0 ? alone1 : alone0;
    auto comm = std::make_shared<PeerCommunicator>();
    comm->peers = {counts(peer, E), counts(peer, B * E)};
    RouterGroups groups{ProcessGroup("tp_cp", {0, 1}, 0, comm), ProcessGroup("tp_dp_cp", {0, 1}, 0, comm)};
    RoutingInput in;
    in.logits = f64(r == 0 ? l0 : l1, {half * B, E});
    in.seq_length = half, in.batch = B;
    GlobalAuxLossTracker tracker;
    const RoutingOutput out = route(ResolvedModelConfig(o), in, groups, &tracker, nullptr);
    sum.aux_loss += out.losses.aux_loss;
    sum.seq_aux_loss += out.losses.seq_aux_loss;
    sum.global_aux_loss += out.losses.global_aux_loss;
    sum.z_loss += out.losses.z_loss;
  }
  CHECK(sum.aux_loss == Approx(whole.losses.aux_loss).epsilon(1e-12));
  CHECK(sum.seq_aux_loss == Approx(whole.losses.seq_aux_loss).epsilon(1e-12));
  CHECK(sum.global_aux_loss == Approx(whole.losses.global_aux_loss).epsilon(1e-12));
  CHECK(sum.z_loss == Approx(whole.losses.z_loss).epsilon(1e-12));  // coeff / |tp×cp| per rank
}

TEST_CASE("router backward from d(top_probs) [T, k] equals the dense d(probs) [T, E] form", "[moe_router]") {
  ModelConfig o = router_model(6, 2);
  o.moe_expert_capacity_factor = 0.75;
  o.moe_aux_loss_coeff = {0.1};
  RoutingInput in;
  in.logits = f64(random_vec(15 * 6, 91), {15, 6});
  GlobalAuxLossTracker tr;
  RoutingSaved saved;
  const RoutingOutput out = route(ResolvedModelConfig(o), in, RouterGroups{}, &tr, &saved);
  REQUIRE(!out.dropped.empty());
  const Vec idx = out.top_indices.to_vector(), g = test::random_tensor({15, 2}, 92).to_vector();
  Vec dense(15 * 6, 0.0);
  for (int64_t t = 0; t < 15; ++t)
    for (int64_t j = 0; j < 2; ++j) dense[t * 6 + int64_t(idx[t * 2 + j])] = g[t * 2 + j];
  const RoutingLossGrads dl{0.5, 0, 0, 0};
  CHECK(route_backward_topk(saved, f64(g, {15, 2}), dl).to_vector() ==
        route_backward(saved, f64(dense, {15, 6}), dl).to_vector());
}

TEST_CASE("router dtypes: an f32 model with fp64 or fp32 router dtype matches the f64 router", "[moe_router]") {
  ModelConfig o = router_model(8, 2);
  o.moe_aux_loss_coeff = {0.1};
  o.moe_z_loss_coeff = 0.01;
  LayerEnv e64, e32;
  e64.dtype = DType::F64;
  e32.dtype = DType::F32;
  const Tensor x = test::random_tensor({3, 2, 6}, 95);
  const Tensor R = test::random_tensor({6, 8}, 96);
  auto run = [&](const LayerEnv& env, std::optional<MoeRouterDtype> rd, Tensor& dx, Tensor& dW) {
    ModelConfig oo = o;
    oo.moe_router_dtype = rd;  // null: the input dtype
    TopKRouter router("decoder.layers.0.mlp", ResolvedModelConfig(oo), env);
    init_parameter(router.weight, 97);
    RouterState st;
    const RoutingOutput out = router.forward(x.to(env.dtype), RouterRun{}, &st);
    dx = router.backward(st, R, {1.0, 0, 0, 1.0});
    dW = router.weight.main_grad.clone();
    return out.probs;
  };
  Tensor dx64, dW64, dx, dW;
  const Tensor p64 = run(e64, MoeRouterDtype::Fp64, dx64, dW64);
  for (std::optional<MoeRouterDtype> rd :
       {std::optional(MoeRouterDtype::Fp64), std::optional(MoeRouterDtype::Fp32), std::optional<MoeRouterDtype>()}) {
    const Tensor p = run(e32, rd, dx, dW);
    CHECK(p.dtype() == (rd == MoeRouterDtype::Fp64 ? DType::F64 : DType::F32));
    CHECK(dx.dtype() == DType::F32);
    CHECK(dW.dtype() == DType::F32);
    CHECK(test::normalized_error(p, p64) < 1e-6);
    CHECK(test::normalized_error(dx, dx64) < 1e-5);
    CHECK(test::normalized_error(dW, dW64) < 1e-5);
  }
}
