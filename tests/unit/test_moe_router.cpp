// MoE TopKRouter (models/layers/moe/): routing against a loop-by-loop f64 reference written here
// from the spec (../shared/specs/megatron-observation-tracer-moe.md §6.1–§6.9) for every score
// function, pre/post softmax, group limits, scaling, expert bias, both drop policies with and
// without pad-to-capacity and padding rows, the three aux losses and the z-loss (values, and
// gradients by central finite differences through the whole router: x and W), jitter layout
// independence, forced balancing, expert-bias bookkeeping, inference routing, option checks.
#include <algorithm>
#include <cmath>
#include <set>

#include "models/layers/moe/router.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::layers;
using namespace strata::layers::moe;

namespace {

RouterOptions make_options(int64_t E, int64_t k, int64_t H = 6) {
  RouterOptions o;
  o.num_moe_experts = E;
  o.moe_router_topk = k;
  o.hidden_size = H;
  o.moe_router_dtype = RouterDType::Fp64;
  o.init_method_std = 0.5;
  return o;
}

// ---- the reference: plain loops from the spec ------------------------------------------------
using Vec = std::vector<double>;

// k passes of "largest not yet taken" (strict > keeps the lower index on ties).
std::vector<int64_t> ref_topk(const Vec& v, int64_t k, const std::vector<bool>& allowed) {
  std::vector<int64_t> out;
  std::vector<bool> used(v.size(), false);
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < static_cast<int64_t>(v.size()); ++e)
      if (allowed[e] && !used[e] && (best < 0 || v[e] > v[best])) best = e;
    used[best] = true;
    out.push_back(best);
  }
  return out;
}

std::vector<int64_t> ref_choose(const RouterOptions& o, const Vec& v) {
  const int64_t E = o.num_moe_experts, k = o.moe_router_topk;
  std::vector<bool> allowed(E, true);
  if (o.moe_router_group_topk) {
    const int64_t G = *o.moe_router_num_groups, g = *o.moe_router_group_topk, m = E / G;
    Vec group_score(G, 0.0);
    for (int64_t gi = 0; gi < G; ++gi) {
      Vec part(v.begin() + gi * m, v.begin() + (gi + 1) * m);
      for (int64_t e : ref_topk(part, k / g, std::vector<bool>(m, true))) group_score[gi] += part[e];
    }
    const std::vector<int64_t> groups = ref_topk(group_score, g, std::vector<bool>(G, true));
    for (int64_t e = 0; e < E; ++e)
      allowed[e] = std::find(groups.begin(), groups.end(), e / m) != groups.end();
  }
  return ref_topk(v, k, allowed);
}

Vec ref_softmax(const Vec& l) {
  double m = *std::max_element(l.begin(), l.end()), s = 0;
  Vec p(l.size());
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(l[i] - m);
  for (double& x : p) x /= s;
  return p;
}

double ref_score(ScoreFunction f, double x) {
  return f == ScoreFunction::Sigmoid ? 1 / (1 + std::exp(-x)) : std::sqrt(std::log(1 + std::exp(x)));
}

struct Ref {
  Vec probs;                  // [T, E]
  std::vector<int> map;       // [T, E]
  std::vector<std::vector<int64_t>> top;
  std::set<std::pair<int64_t, int64_t>> dropped;
  double aux = 0, seq = 0, glob = 0, z = 0;
};

// Selection, probabilities and capacity of T tokens of logits l [T, E].
Ref ref_route(const RouterOptions& o, const Vec& l, int64_t T, const Vec& bias) {
  const int64_t E = o.num_moe_experts, k = o.moe_router_topk;
  const double scale = o.moe_router_topk_scaling_factor.value_or(1.0);
  Ref r{Vec(T * E, 0.0), std::vector<int>(T * E, 0), {}, {}};
  for (int64_t t = 0; t < T; ++t) {
    Vec row(l.begin() + t * E, l.begin() + (t + 1) * E), p(k);
    std::vector<int64_t> idx;
    if (o.moe_router_score_function == ScoreFunction::Softmax && o.moe_router_pre_softmax) {
      const Vec s = ref_softmax(row);
      idx = ref_choose(o, s);
      for (int64_t j = 0; j < k; ++j) p[j] = s[idx[j]];
    } else if (o.moe_router_score_function == ScoreFunction::Softmax) {
      idx = ref_choose(o, row);
      Vec sel(k);
      for (int64_t j = 0; j < k; ++j) sel[j] = row[idx[j]];
      p = ref_softmax(sel);
    } else {
      Vec s(E), biased(E);
      for (int64_t e = 0; e < E; ++e) s[e] = ref_score(o.moe_router_score_function, row[e]);
      for (int64_t e = 0; e < E; ++e) biased[e] = s[e] + (bias.empty() ? 0.0 : bias[e]);
      idx = ref_choose(o, biased);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += p[j] = s[idx[j]];
      if (k > 1)
        for (double& x : p) x /= sum + 1e-20;
    }
    for (int64_t j = 0; j < k; ++j) {
      r.probs[t * E + idx[j]] = p[j] * scale;
      r.map[t * E + idx[j]] = 1;
    }
    r.top.push_back(idx);
  }
  if (!o.moe_expert_capacity_factor) return r;
  const int64_t cap = static_cast<int64_t>(std::ceil(double(T * k) / double(E) * *o.moe_expert_capacity_factor));
  std::vector<int> keep(T * E, 1);
  if (cap <= T)
    for (int64_t e = 0; e < E; ++e)
      for (int64_t t = 0; t < T; ++t) {
        auto key = [&](int64_t u) {
          return o.moe_token_drop_policy == TokenDropPolicy::Probs ? r.probs[u * E + e] : double(r.map[u * E + e]);
        };
        int64_t rank = 0;  // tokens ahead of t: a larger key, or the same key and a lower index
        for (int64_t u = 0; u < T; ++u) rank += key(u) > key(t) || (key(u) == key(t) && u < t);
        keep[t * E + e] = rank < cap;
      }
  for (int64_t i = 0; i < T * E; ++i) {
    const int fin = o.moe_pad_expert_input_to_capacity ? keep[i] : (r.map[i] && keep[i]);
    if (r.map[i] && !fin) r.dropped.insert({i / E, i % E});
    r.map[i] = fin;
    if (!fin) r.probs[i] = 0;
  }
  return r;
}

// Aux scores [T, E] and plain top-k map, zero on padding rows.
void ref_aux_inputs(const RouterOptions& o, const Vec& l, int64_t T, const std::vector<int>& pad, Vec& A,
                    Vec& M) {
  const int64_t E = o.num_moe_experts;
  A.assign(T * E, 0.0);
  M.assign(T * E, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    if (!pad.empty() && pad[t]) continue;
    Vec row(l.begin() + t * E, l.begin() + (t + 1) * E), s(E);
    if (o.moe_router_score_function == ScoreFunction::Softmax) {
      s = ref_softmax(row);
    } else {
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += s[e] = ref_score(o.moe_router_score_function, row[e]);
      for (double& x : s) x /= sum + 1e-20;
    }
    for (int64_t e = 0; e < E; ++e) A[t * E + e] = s[e];
    for (int64_t e : ref_topk(s, o.moe_router_topk, std::vector<bool>(E, true))) M[t * E + e] = 1;
  }
}

// Switch loss c·E/(k·T²)·Σ_e (Σ_t P(t, e))·N_e over the rows `rows` of A.
double ref_switch(double c, int64_t E, int64_t k, double T_tot, const Vec& P_sum, const Vec& N) {
  double s = 0;
  for (int64_t e = 0; e < E; ++e) s += P_sum[e] * N[e];
  return c * E / (k * T_tot * T_tot) * s;
}

// aux_loss, seq_aux_loss (S sequences of length... [S, B] tokens) and z-loss of one micro-batch.
void ref_losses(const RouterOptions& o, const Vec& l, int64_t S, int64_t B, const std::vector<int>& pad, bool has_mask,
                Ref& r) {
  const int64_t T = S * B, E = o.num_moe_experts, k = o.moe_router_topk;
  Vec A, M;
  ref_aux_inputs(o, l, T, pad, A, M);
  Vec Psum(E, 0.0), N(E, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) Psum[e] += A[t * E + e], N[e] += M[t * E + e];
  double Nsum = 0;
  for (double n : N) Nsum += n;
  if (o.aux_loss_coeff("aux_loss") > 0)
    r.aux = ref_switch(o.aux_loss_coeff("aux_loss"), E, k, has_mask ? Nsum / k : double(T), Psum, N);
  if (o.aux_loss_coeff("seq_aux_loss") > 0) {
    const double T_seq = has_mask ? Nsum / double(k * B) : double(S);
    for (int64_t j = 0; j < B; ++j) {  // sequence j: tokens i·B + j
      Vec Pj(E, 0.0), Nj(E, 0.0);
      for (int64_t i = 0; i < S; ++i)
        for (int64_t e = 0; e < E; ++e) Pj[e] += A[(i * B + j) * E + e], Nj[e] += M[(i * B + j) * E + e];
      r.seq += ref_switch(o.aux_loss_coeff("seq_aux_loss"), E, k, T_seq, Pj, Nj) / double(B);
    }
  }
  if (o.moe_z_loss_coeff) {
    double sum = 0;
    int64_t n = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!pad.empty() && pad[t]) continue;
      double m = -1e300, se = 0;
      for (int64_t e = 0; e < E; ++e) m = std::max(m, l[t * E + e]);
      for (int64_t e = 0; e < E; ++e) se += std::exp(l[t * E + e] - m);
      sum += (m + std::log(se)) * (m + std::log(se));
      ++n;
    }
    r.z = *o.moe_z_loss_coeff * sum / std::max<int64_t>(n, 1);
  }
}

Tensor f64(const Vec& v, const Shape& s) { return Tensor::from_vector(v, s, DType::F64); }

RoutingOutput run_route(const RouterOptions& o, const Vec& l, int64_t S, int64_t B, const Vec& bias,
                        const std::vector<int>& pad, GlobalAuxLossTracker* tracker = nullptr) {
  RoutingInput in;
  in.logits = f64(l, {S * B, o.num_moe_experts});
  if (!bias.empty()) in.expert_bias = Tensor::from_vector(bias, {o.num_moe_experts}, DType::F32);
  if (!pad.empty()) in.padding_mask = Tensor::from_vector(Vec(pad.begin(), pad.end()), {S * B}, DType::U8);
  in.seq_length = S, in.batch = B;
  GlobalAuxLossTracker local;
  return route(o, in, RouterGroups{}, tracker ? tracker : &local, nullptr);
}

Vec random_vec(int64_t n, uint64_t seed, double lo = -2, double hi = 2) {
  return test::random_tensor({n}, seed, lo, hi).to_vector();
}

// Checks route() against ref_route on random logits (probs, map, top indices, dropped pairs,
// tokens per expert = a direct count of the map over non-padding tokens).
void check_selection(const RouterOptions& o, uint64_t seed, const std::vector<int>& pad = {}, bool with_bias = false) {
  const int64_t S = 5, B = 3, T = S * B, E = o.num_moe_experts, k = o.moe_router_topk;
  const Vec l = random_vec(T * E, seed);
  const Vec bias = with_bias ? Vec(random_vec(E, seed + 7, -0.3, 0.3)) : Vec{};
  Vec bias_f32 = bias;
  for (double& b : bias_f32) b = static_cast<float>(b);
  const RoutingOutput out = run_route(o, l, S, B, bias_f32, pad);
  const Ref r = ref_route(o, l, T, bias_f32);
  CHECK(test::max_abs_diff(out.probs, f64(r.probs, {T, E})) < 1e-14);
  const Vec map = out.routing_map.to_vector(), idx = out.top_indices.to_vector(), top_p = out.top_probs.to_vector();
  Vec counts(E, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      REQUIRE(map[t * E + e] == r.map[t * E + e]);
      if (pad.empty() || !pad[t]) counts[e] += map[t * E + e];
    }
    for (int64_t j = 0; j < k; ++j) REQUIRE(idx[t * k + j] == double(r.top[t][j]));
    if (!with_bias)  // descending selection score = descending probs without a bias
      for (int64_t j = 1; j < k; ++j) CHECK(top_p[t * k + j] <= top_p[t * k + j - 1]);
  }
  CHECK(out.tokens_per_expert.to_vector() == counts);
  std::set<std::pair<int64_t, int64_t>> dropped(out.dropped.begin(), out.dropped.end());
  CHECK(dropped == r.dropped);
  CHECK(dropped.size() == out.dropped.size());
}

}  // namespace

TEST_CASE("router selection matches the reference for every score function", "[moe_router]") {
  RouterOptions o = make_options(8, 2);
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
    o.moe_router_score_function = ScoreFunction::Sigmoid;
    o.moe_router_topk = 1;
    check_selection(o, 14);
    o.moe_router_topk = 3;
    check_selection(o, 15);
    o.moe_router_topk_scaling_factor = 1.5;
    check_selection(o, 16, {}, true);
  }
  SECTION("sqrtsoftplus with bias") {
    o.moe_router_score_function = ScoreFunction::SqrtSoftplus;
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
    o.moe_router_score_function = ScoreFunction::Sigmoid;
    o.moe_router_topk_scaling_factor = 2.5;
    check_selection(o, 20, {}, true);
  }
}

TEST_CASE("router expert bias changes selection only, and group limits change it", "[moe_router]") {
  RouterOptions o = make_options(4, 2);
  o.moe_router_score_function = ScoreFunction::Sigmoid;
  const Vec l = {2.0, 1.0, 0.0, -1.0};
  // bias lifts expert 3 (σ(-1) + 0.9 = 1.17) above expert 0 (σ(2) = 0.88) and expert 1: selection
  // {3, 0} in biased-score order, probs from the unbiased scores
  const RoutingOutput out = run_route(o, l, 1, 1, {0.0f, 0.0f, 0.0f, 0.9f}, {});
  CHECK(out.top_indices.to_vector() == Vec{3, 0});
  const double s0 = 1 / (1 + std::exp(-2.0)), s3 = 1 / (1 + std::exp(1.0));
  CHECK(out.top_probs.to_vector()[0] == Approx(s3 / (s0 + s3)).epsilon(1e-14));
  CHECK(out.top_probs.to_vector()[1] == Approx(s0 / (s0 + s3)).epsilon(1e-14));
  // groups {0,1}, {2,3}; group_topk 1, top-(2/1) sum: group 0 wins (3.0 vs -1.0 in logits)
  RouterOptions g = make_options(4, 2);
  g.moe_router_num_groups = 2;
  g.moe_router_group_topk = 1;
  const RoutingOutput og = run_route(g, {0.5, 0.4, 0.45, -3.0}, 1, 1, {}, {});
  CHECK(og.top_indices.to_vector() == Vec{0, 1});  // without groups it would be {0, 2}
  // ties: lower expert id first
  const RoutingOutput tie = run_route(make_options(4, 2), {1.0, 1.0, 1.0, 1.0}, 1, 1, {}, {});
  CHECK(tie.top_indices.to_vector() == Vec{0, 1});
}

TEST_CASE("router capacity: both drop policies, pad-to-capacity, padding rows", "[moe_router]") {
  for (auto policy : {TokenDropPolicy::Probs, TokenDropPolicy::Position})
    for (bool pad_to_cap : {false, true})
      for (double cf : {0.5, 1.0, 1.5})
        for (bool padded : {false, true}) {
          RouterOptions o = make_options(6, 2);
          o.moe_expert_capacity_factor = cf;
          o.moe_token_drop_policy = policy;
          o.moe_pad_expert_input_to_capacity = pad_to_cap;
          std::vector<int> pad;
          if (padded) pad = {0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1};
          INFO("policy " << int(policy) << " pad_to_capacity " << pad_to_cap << " cf " << cf << " padded " << padded);
          check_selection(o, 31 + static_cast<uint64_t>(cf * 10), pad);
          o.moe_router_score_function = ScoreFunction::Sigmoid;
          check_selection(o, 41, pad, true);
        }
}

TEST_CASE("router capacity: a hand-checked drop", "[moe_router]") {
  // 4 tokens, E = 2, k = 1 pre-softmax, capacity ceil(4·1/2·0.5) = 1: expert 0 gets tokens 0, 1, 2.
  RouterOptions o = make_options(2, 1);
  o.moe_router_pre_softmax = true;
  o.moe_expert_capacity_factor = 0.5;
  const Vec l = {1.0, 0.0, 3.0, 0.0, 2.0, 0.0, 0.0, 1.0};
  const RoutingOutput probs = run_route(o, l, 4, 1, {}, {});
  CHECK(probs.capacity == 1);
  using P = std::vector<std::pair<int64_t, int64_t>>;
  CHECK(probs.dropped == P{{0, 0}, {2, 0}});  // the highest prob (token 1) stays
  o.moe_token_drop_policy = TokenDropPolicy::Position;
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
  RouterOptions o = make_options(4, 2);
  o.moe_aux_loss_coeff = {0.01};
  const Vec l = {std::log(4.0), std::log(2.0), 0.0, 0.0, std::log(4.0), 0.0, std::log(2.0), 0.0};
  const RoutingOutput out = run_route(o, l, 2, 1, {}, {});
  CHECK(out.losses.aux_loss == Approx(0.01375).epsilon(1e-13));
  // post-softmax top-2 of token 0: softmax([ln 4, ln 2]) = [2/3, 1/3]
  CHECK(out.top_probs.to_vector()[0] == Approx(2.0 / 3.0).epsilon(1e-14));
}

TEST_CASE("router aux losses and z-loss match the reference (values)", "[moe_router]") {
  const int64_t S = 5, B = 3, T = S * B;
  for (auto f : {ScoreFunction::Softmax, ScoreFunction::Sigmoid, ScoreFunction::SqrtSoftplus})
    for (bool padded : {false, true}) {
      RouterOptions o = make_options(6, 2);
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
      INFO("score " << score_function_name(f) << " padded " << padded);
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
  RouterOptions o;
  std::vector<int> pad;
  RoutingLossGrads weights{0.7, 0.9, 1.1, 1.3};
};

// Objective Σ probs·R + Σ w·loss through the whole router; checks d/dx and d/dW by central
// finite differences.
void check_router_gradients(GradCase c, uint64_t seed) {
  const int64_t s = 3, b = 2, H = c.o.hidden_size, E = c.o.num_moe_experts, T = s * b;
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter router("decoder.layers.0.mlp", c.o, env);
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
  c.o = make_options(8, 2);
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
    c.o.moe_router_score_function = ScoreFunction::Sigmoid;
    c.o.moe_router_enable_expert_bias = true;
    c.o.moe_router_topk = 4;
    c.o.moe_router_num_groups = 4;
    c.o.moe_router_group_topk = 2;
    c.pad = pad;
    check_router_gradients(c, 64);
  }
  SECTION("sigmoid top-1, sqrtsoftplus top-3") {
    c.o.moe_router_score_function = ScoreFunction::Sigmoid;
    c.o.moe_router_topk = 1;
    check_router_gradients(c, 65);
    c.o.moe_router_score_function = ScoreFunction::SqrtSoftplus;
    c.o.moe_router_topk = 3;
    check_router_gradients(c, 66);
  }
  SECTION("capacity with dropping (probs and position, pad to capacity)") {
    c.o.moe_expert_capacity_factor = 0.75;
    check_router_gradients(c, 67);
    c.o.moe_token_drop_policy = TokenDropPolicy::Position;
    c.o.moe_pad_expert_input_to_capacity = true;
    c.pad = pad;
    check_router_gradients(c, 68);
  }
}

TEST_CASE("router jitter is keyed by the global token: two halves draw what the whole draws", "[moe_router]") {
  RouterOptions o = make_options(8, 2);
  o.moe_input_jitter_eps = 0.2;
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter router("decoder.layers.0.mlp", o, env);
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
  RouterOptions plain = o;
  plain.moe_input_jitter_eps.reset();
  TopKRouter no_jitter("decoder.layers.0.mlp", plain, env);
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
  RouterOptions o = make_options(8, 2);
  o.moe_router_force_load_balancing = true;
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter a("decoder.layers.0.mlp", o, env), b("decoder.layers.0.mlp", o, env);
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
  RouterOptions o = make_options(8, 2);
  o.moe_router_score_function = ScoreFunction::Sigmoid;
  o.moe_router_enable_expert_bias = true;
  o.moe_router_bias_update_rate = 0.01;
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter router("decoder.layers.5.mlp", o, env);
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
  RouterOptions o = make_options(8, 2);
  o.moe_router_score_function = ScoreFunction::Sigmoid;
  o.moe_router_enable_expert_bias = true;
  o.moe_expert_capacity_factor = 0.25;
  o.moe_aux_loss_coeff = {0.1};
  o.moe_z_loss_coeff = 0.1;
  LayerEnv env;
  env.dtype = DType::F64;
  TopKRouter router("decoder.layers.0.mlp", o, env);
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
  RouterOptions o = make_options(8, 2);
  const Vec l = random_vec(15 * 8, 71);
  RoutingInput in;
  in.logits = Tensor::from_vector(l, {15, 8}, DType::F32);
  GlobalAuxLossTracker tr;
  const RoutingOutput out = route(o, in, RouterGroups{}, &tr, nullptr);
  CHECK(out.probs.dtype() == DType::F32);
  const Ref r = ref_route(o, in.logits.to_vector(), 15, {});
  CHECK(test::max_abs_diff(out.probs, f64(r.probs, {15, 8})) < 1e-7);
}

TEST_CASE("router option checks name the fields", "[moe_router]") {
  auto fails_with = [](RouterOptions o, const std::string& field) {
    INFO(field);
    try {
      check_router_options(o);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
  };
  RouterOptions o = make_options(8, 2);
  check_router_options(o);
  RouterOptions a = o;
  a.moe_router_enable_expert_bias = true;
  fails_with(a, "moe_router_enable_expert_bias");
  a = o;
  a.moe_router_topk = 1;
  fails_with(a, "moe_router_pre_softmax");
  a = o;
  a.moe_router_num_groups = 3;
  a.moe_router_group_topk = 1;
  fails_with(a, "moe_router_num_groups");
  a = o;
  a.moe_router_group_topk = 1;
  fails_with(a, "moe_router_num_groups");
  a = o;
  a.moe_router_num_groups = 4;
  a.moe_router_group_topk = 5;
  fails_with(a, "moe_router_group_topk");
  a = o;
  a.moe_router_topk = 9;
  fails_with(a, "moe_router_topk");
  a = o;
  a.moe_router_load_balancing_type = {"aux_loss", "seq_aux_loss"};
  a.moe_aux_loss_coeff = {0.1, 0.2, 0.3};
  fails_with(a, "moe_aux_loss_coeff");
  a = o;
  a.moe_router_load_balancing_type = {"sinkhorn"};
  fails_with(a, "moe_router_load_balancing_type");
  a = o;
  a.moe_pad_expert_input_to_capacity = true;
  fails_with(a, "moe_expert_capacity_factor");
  LayerEnv env;
  RouterOptions bad = o;
  bad.moe_router_enable_expert_bias = true;
  CHECK_THROWS_AS(TopKRouter("decoder.layers.0.mlp", bad, env), Error);
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
  RouterOptions o = make_options(E, 2);
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
    const RoutingOutput out = route(o, in, groups, &tracker, nullptr);
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
  RouterOptions o = make_options(6, 2);
  o.moe_expert_capacity_factor = 0.75;
  o.moe_aux_loss_coeff = {0.1};
  RoutingInput in;
  in.logits = f64(random_vec(15 * 6, 91), {15, 6});
  GlobalAuxLossTracker tr;
  RoutingSaved saved;
  const RoutingOutput out = route(o, in, RouterGroups{}, &tr, &saved);
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
  RouterOptions o = make_options(8, 2);
  o.moe_aux_loss_coeff = {0.1};
  o.moe_z_loss_coeff = 0.01;
  LayerEnv e64, e32;
  e64.dtype = DType::F64;
  e32.dtype = DType::F32;
  const Tensor x = test::random_tensor({3, 2, 6}, 95);
  const Tensor R = test::random_tensor({6, 8}, 96);
  auto run = [&](const LayerEnv& env, RouterDType rd, Tensor& dx, Tensor& dW) {
    RouterOptions oo = o;
    oo.moe_router_dtype = rd;
    TopKRouter router("decoder.layers.0.mlp", oo, env);
    init_parameter(router.weight, 97);
    RouterState st;
    const RoutingOutput out = router.forward(x.to(env.dtype), RouterRun{}, &st);
    dx = router.backward(st, R, {1.0, 0, 0, 1.0});
    dW = router.weight.main_grad.clone();
    return out.probs;
  };
  Tensor dx64, dW64, dx, dW;
  const Tensor p64 = run(e64, RouterDType::Fp64, dx64, dW64);
  for (RouterDType rd : {RouterDType::Fp64, RouterDType::Fp32, RouterDType::Input}) {
    const Tensor p = run(e32, rd, dx, dW);
    CHECK(p.dtype() == (rd == RouterDType::Fp64 ? DType::F64 : DType::F32));
    CHECK(dx.dtype() == DType::F32);
    CHECK(dW.dtype() == DType::F32);
    CHECK(test::normalized_error(p, p64) < 1e-6);
    CHECK(test::normalized_error(dx, dx64) < 1e-5);
    CHECK(test::normalized_error(dW, dW64) < 1e-5);
  }
}
