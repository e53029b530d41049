// MoE TopKRouter (models/layers/moe/): routing against the loop-by-loop f64 reference of
// moe_router_reference.h for every score function, pre/post softmax, group limits, scaling, expert
// bias, both drop policies with and without pad-to-capacity and padding rows, the three aux losses
// and the z-loss (values, and gradients by central finite differences through the whole router: x
// and W). The modes, bookkeeping and refused configs are in test_moe_router_modes.cpp.
#include "moe_router_reference.h"

using namespace strata;
using namespace strata::layers;
using namespace strata::layers::moe;
using namespace strata::test::router_ref;

TEST_CASE("router selection matches the reference for every score function", "[moe_router]") {
  ModelConfig o = router_model(8, 2);
  SECTION("softmax post-softmax") { check_selection(o, 11); }
  SECTION("softmax pre-softmax top-1 and top-3 with scaling") {
    o.moe_router_pre_softmax = true;
    o.moe_router_topk = 1;
    check_selection(o, 12);
    o.moe_router_topk = 3;
    o.moe_router_topk_scaling_factor = 2.5;
    check_selection(o, 13);
  }
  SECTION("sigmoid top-1, top-3, scaling, expert bias") {
    o.moe_router_score_function = MoeScoreFunction::Sigmoid;
    o.moe_router_topk = 1;
    check_selection(o, 14);
    o.moe_router_topk = 3;
    check_selection(o, 15);
    o.moe_router_topk_scaling_factor = 1.5;
    check_selection(o, 16, {}, true);
  }
  SECTION("sqrtsoftplus with bias") {
    o.moe_router_score_function = MoeScoreFunction::SqrtSoftplus;
    check_selection(o, 17, {}, true);
  }
  SECTION("group-limited: softmax post, pre, sigmoid + bias (DeepSeek style)") {
    o.moe_router_topk = 4;
    o.moe_router_num_groups = 4;
    o.moe_router_group_topk = 2;
    check_selection(o, 18);
    o.moe_router_pre_softmax = true;
    check_selection(o, 19);
    o.moe_router_pre_softmax = false;
    o.moe_router_score_function = MoeScoreFunction::Sigmoid;
    o.moe_router_topk_scaling_factor = 2.5;
    check_selection(o, 20, {}, true);
  }
}

TEST_CASE("router expert bias changes selection only, and group limits change it", "[moe_router]") {
  ModelConfig o = router_model(4, 2);
  o.moe_router_score_function = MoeScoreFunction::Sigmoid;
  const Vec l = {2.0, 1.0, 0.0, -1.0};
  // bias lifts expert 3 (σ(-1) + 0.9 = 1.17) above expert 0 (σ(2) = 0.88) and expert 1: selection
  // {3, 0} in biased-score order, probs from the unbiased scores
  const RoutingOutput out = run_route(o, l, 1, 1, {0.0f, 0.0f, 0.0f, 0.9f}, {});
  CHECK(out.top_indices.to_vector() == Vec{3, 0});
  const double s0 = 1 / (1 + std::exp(-2.0)), s3 = 1 / (1 + std::exp(1.0));
  CHECK(out.top_probs.to_vector()[0] == Approx(s3 / (s0 + s3)).epsilon(1e-14));
  CHECK(out.top_probs.to_vector()[1] == Approx(s0 / (s0 + s3)).epsilon(1e-14));
  // groups {0,1}, {2,3}; group_topk 1, top-(2/1) sum: group 0 wins (3.0 vs -1.0 in logits)
  ModelConfig g = router_model(4, 2);
  g.moe_router_num_groups = 2;
  g.moe_router_group_topk = 1;
  const RoutingOutput og = run_route(g, {0.5, 0.4, 0.45, -3.0}, 1, 1, {}, {});
  CHECK(og.top_indices.to_vector() == Vec{0, 1});  // without groups it would be {0, 2}
  // ties: lower expert id first
  const RoutingOutput tie = run_route(router_model(4, 2), {1.0, 1.0, 1.0, 1.0}, 1, 1, {}, {});
  CHECK(tie.top_indices.to_vector() == Vec{0, 1});
}

TEST_CASE("router capacity: both drop policies, pad-to-capacity, padding rows", "[moe_router]") {
  for (auto policy : {MoeTokenDropPolicy::Probs, MoeTokenDropPolicy::Position})
    for (bool pad_to_cap : {false, true})
      for (double cf : {0.5, 1.0, 1.5})
        for (bool padded : {false, true}) {
          ModelConfig o = router_model(6, 2);
          o.moe_expert_capacity_factor = cf;
          o.moe_token_drop_policy = policy;
          o.moe_pad_expert_input_to_capacity = pad_to_cap;
          std::vector<int> pad;
          if (padded) pad = {0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1};
          INFO("policy " << int(policy) << " pad_to_capacity " << pad_to_cap << " cf " << cf << " padded " << padded);
          check_selection(o, 31 + static_cast<uint64_t>(cf * 10), pad);
          o.moe_router_score_function = MoeScoreFunction::Sigmoid;
          check_selection(o, 41, pad, true);
        }
}

TEST_CASE("router capacity: a hand-checked drop", "[moe_router]") {
  // 4 tokens, E = 2, k = 1 pre-softmax, capacity ceil(4·1/2·0.5) = 1: expert 0 gets tokens 0, 1, 2.
  ModelConfig o = router_model(2, 1);
  o.moe_router_pre_softmax = true;
  o.moe_expert_capacity_factor = 0.5;
  const Vec l = {1.0, 0.0, 3.0, 0.0, 2.0, 0.0, 0.0, 1.0};
  const RoutingOutput probs = run_route(o, l, 4, 1, {}, {});
  CHECK(probs.capacity == 1);
  using P = std::vector<std::pair<int64_t, int64_t>>;
  CHECK(probs.dropped == P{{0, 0}, {2, 0}});  // the highest prob (token 1) stays
  o.moe_token_drop_policy = MoeTokenDropPolicy::Position;
  const RoutingOutput pos = run_route(o, l, 4, 1, {}, {});
  CHECK(pos.dropped == P{{1, 0}, {2, 0}});  // the first token stays
  CHECK(pos.top_kept.to_vector() == Vec{1, 0, 0, 1});
  o.moe_pad_expert_input_to_capacity = true;
  const RoutingOutput padded = run_route(o, l, 4, 1, {}, {});
  CHECK(padded.tokens_per_expert.to_vector() == Vec{1, 1});
}

TEST_CASE("router aux_loss: a hand-computed case (E = 4, k = 2)", "[moe_router]") {
  // softmax scores [.5 .25 .125 .125] and [.5 .125 .25 .125]: top-2 {0, 1} and {0, 2}; N = [2 1 1 0],
  // Σ_t P = [1 .375 .375 .25]; loss = c·E/(k·T²)·Σ P·N = 0.01·4/(2·4)·2.75 = 0.01375.
  ModelConfig o = router_model(4, 2);
  o.moe_aux_loss_coeff = {0.01};
  const Vec l = {std::log(4.0), std::log(2.0), 0.0, 0.0, std::log(4.0), 0.0, std::log(2.0), 0.0};
  const RoutingOutput out = run_route(o, l, 2, 1, {}, {});
  CHECK(out.losses.aux_loss == Approx(0.01375).epsilon(1e-13));
  // post-softmax top-2 of token 0: softmax([ln 4, ln 2]) = [2/3, 1/3]
  CHECK(out.top_probs.to_vector()[0] == Approx(2.0 / 3.0).epsilon(1e-14));
}

TEST_CASE("router aux losses and z-loss match the reference (values)", "[moe_router]") {
  const int64_t S = 5, B = 3, T = S * B;
  for (auto f : {MoeScoreFunction::Softmax, MoeScoreFunction::Sigmoid, MoeScoreFunction::SqrtSoftplus})
    for (bool padded : {false, true}) {
      ModelConfig o = router_model(6, 2);
      o.moe_router_score_function = f;
      o.moe_router_load_balancing_type = {"aux_loss", "seq_aux_loss", "global_aux_loss"};
      o.moe_aux_loss_coeff = {0.01, 0.02, 0.03};
      o.moe_z_loss_coeff = 1e-3;
      std::vector<int> pad;
      if (padded) pad = {0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1};
      const Vec l1 = random_vec(T * 6, 51), l2 = random_vec(T * 6, 52);
      GlobalAuxLossTracker tracker;
      const RoutingOutput o1 = run_route(o, l1, S, B, {}, pad, &tracker);
      const RoutingOutput o2 = run_route(o, l2, S, B, {}, pad, &tracker);
      Ref r1, r2;
      ref_losses(o, l1, S, B, pad, padded, r1);
      ref_losses(o, l2, S, B, pad, padded, r2);
      INFO("score " << to_string(f) << " padded " << padded);
      CHECK(o1.losses.aux_loss == Approx(r1.aux).epsilon(1e-12));
      CHECK(o2.losses.seq_aux_loss == Approx(r2.seq).epsilon(1e-12));
      CHECK(o1.losses.z_loss == Approx(r1.z).epsilon(1e-12));
      // global: micro-batch 2 uses the running mean of both micro-batches' counts
      Vec A1, M1, A2, M2;
      ref_aux_inputs(o, l1, T, pad, A1, M1);
      ref_aux_inputs(o, l2, T, pad, A2, M2);
      Vec P2(6, 0.0), Nbar(6, 0.0), N2(6, 0.0);
      for (int64_t i = 0; i < T * 6; ++i) P2[i % 6] += A2[i], Nbar[i % 6] += (M1[i] + M2[i]) / 2, N2[i % 6] += M2[i];
      double n2 = 0;
      for (double n : N2) n2 += n;
      CHECK(o2.losses.global_aux_loss ==
            Approx(ref_switch(0.03, 6, 2, padded ? n2 / 2 : double(T), P2, Nbar)).epsilon(1e-12));
      CHECK(tracker.steps == 2);
      tracker.reset();
      const RoutingOutput o3 = run_route(o, l2, S, B, {}, pad, &tracker);
      // after reset, the running mean is this micro-batch's counts
      Vec P3(6, 0.0);
      for (int64_t i = 0; i < T * 6; ++i) P3[i % 6] += A2[i];
      CHECK(o3.losses.global_aux_loss ==
            Approx(ref_switch(0.03, 6, 2, padded ? n2 / 2 : double(T), P3, N2)).epsilon(1e-12));
    }
}

namespace {

struct GradCase {
  ModelConfig o;
  std::vector<int> pad;
  RoutingLossGrads weights{0.7, 0.9, 1.1, 1.3};
};

// Objective Σ probs·R + Σ w·loss through the whole router; checks d/dx and d/dW by central
// finite differences.
void check_router_gradients(GradCase c, uint64_t seed) {
  const int64_t s = 3, b = 2, H = c.o.hidden_size, E = *c.o.num_experts, T = s * b;
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter router("decoder.layers.0.mlp", ResolvedModelConfig(c.o), env);
  init_parameter(router.weight, seed);
  if (c.o.moe_router_enable_expert_bias)
    router.expert_bias.value.copy_(test::random_tensor({E}, seed + 1, -0.2, 0.2, DType::F32));
  Tensor x = test::random_tensor({s, b, H}, seed + 2);
  const Tensor R = test::random_tensor({T, E}, seed + 3);
  DropoutKeys keys;
  keys.seed = 99, keys.step = 3;
  RouterRun run;
  run.layer = 2, run.keys = &keys;
  if (!c.pad.empty()) run.padding_mask = Tensor::from_vector(Vec(c.pad.begin(), c.pad.end()), {s, b}, DType::U8);
  auto objective = [&]() {
    router.reset_global_aux_loss_tracker();
    const RoutingOutput out = router.forward(x, run, nullptr);
    const RoutingLosses& L = out.losses;
    return test::dot(out.probs, R) + c.weights.aux_loss * L.aux_loss + c.weights.seq_aux_loss * L.seq_aux_loss +
           c.weights.global_aux_loss * L.global_aux_loss + c.weights.z_loss * L.z_loss;
  };
  router.reset_global_aux_loss_tracker();
  RouterState st;
  const RoutingOutput out = router.forward(x, run, &st);
  router.weight.main_grad.zero_();
  const Tensor dx = router.backward(st, R, c.weights);
  const Tensor dW = router.weight.main_grad.clone();
  test::check_gradient("dx", dx, test::numeric_gradient(x, objective), 1e-7);
  test::check_gradient("dW", dW, test::numeric_gradient(router.weight.value, objective), 1e-7);
  (void)out;
}

}  // namespace

TEST_CASE("router gradients by finite differences through gating and routing (f64)", "[moe_router]") {
  GradCase c;
  c.o = router_model(8, 2);
  c.o.moe_router_load_balancing_type = {"aux_loss", "seq_aux_loss", "global_aux_loss"};
  c.o.moe_aux_loss_coeff = {0.1, 0.2, 0.3};
  c.o.moe_z_loss_coeff = 0.05;
  const std::vector<int> pad = {0, 1, 0, 0, 1, 0};
  SECTION("softmax post-softmax") { check_router_gradients(c, 61); }
  SECTION("softmax post-softmax with padding rows") {
    c.pad = pad;
    check_router_gradients(c, 62);
  }
  SECTION("softmax pre-softmax, scaling, jitter") {
    c.o.moe_router_pre_softmax = true;
    c.o.moe_router_topk_scaling_factor = 2.0;
    c.o.moe_input_jitter_eps = 0.1;
    check_router_gradients(c, 63);
  }
  SECTION("sigmoid, expert bias, groups, padding") {
    c.o.moe_router_score_function = MoeScoreFunction::Sigmoid;
    c.o.moe_router_enable_expert_bias = true;
    c.o.moe_router_topk = 4;
    c.o.moe_router_num_groups = 4;
    c.o.moe_router_group_topk = 2;
    c.pad = pad;
    check_router_gradients(c, 64);
  }
  SECTION("sigmoid top-1, sqrtsoftplus top-3") {
    c.o.moe_router_score_function = MoeScoreFunction::Sigmoid;
    c.o.moe_router_topk = 1;
    check_router_gradients(c, 65);
    c.o.moe_router_score_function = MoeScoreFunction::SqrtSoftplus;
    c.o.moe_router_topk = 3;
    check_router_gradients(c, 66);
  }
  SECTION("capacity with dropping (probs and position, pad to capacity)") {
    c.o.moe_expert_capacity_factor = 0.75;
    check_router_gradients(c, 67);
    c.o.moe_token_drop_policy = MoeTokenDropPolicy::Position;
    c.o.moe_pad_expert_input_to_capacity = true;
    c.pad = pad;
    check_router_gradients(c, 68);
  }
}

