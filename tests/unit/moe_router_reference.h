// Shared by the MoE router tests (test_moe_router*.cpp): a loop-by-loop f64 reference of the
// TopKRouter written from Megatron's router.py and moe_utils.py (reading the router fields of a
// model section) and the config/input builders.
#pragma once
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "models/layers/moe/router.h"
#include "moe_test_config.h"
#include "test_helpers.h"

namespace strata::test::router_ref {

using namespace strata::layers;
using namespace strata::layers::moe;

// A model section with E experts, top-k routing and hidden size H: f64 routing, router weights
// N(0, 0.5). A test sets more router fields; route() and TopKRouter take it resolved.
inline ModelConfig router_model(int64_t E, int64_t k, int64_t H = 6) {
  ModelConfig o = test::moe_model_config(E, k, H);
  o.moe_router_dtype = MoeRouterDtype::Fp64;
  o.init_method_std = 0.5;
  return o;
}

// ---- the reference: plain loops from the spec ------------------------------------------------
using Vec = std::vector<double>;

// k passes of "largest not yet taken" (strict > keeps the lower index on ties).
inline std::vector<int64_t> ref_topk(const Vec& v, int64_t k, const std::vector<bool>& allowed) {
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

inline std::vector<int64_t> ref_choose(const ModelConfig& o, const Vec& v) {
  const int64_t E = *o.num_experts, k = o.moe_router_topk;
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

inline Vec ref_softmax(const Vec& l) {
  double m = *std::max_element(l.begin(), l.end()), s = 0;
  Vec p(l.size());
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(l[i] - m);
  for (double& x : p) x /= s;
  return p;
}

inline double ref_score(MoeScoreFunction f, double x) {
  return f == MoeScoreFunction::Sigmoid ? 1 / (1 + std::exp(-x)) : std::sqrt(std::log(1 + std::exp(x)));
}

struct Ref {
  Vec probs;                  // [T, E]
  std::vector<int> map;       // [T, E]
  std::vector<std::vector<int64_t>> top;
  std::set<std::pair<int64_t, int64_t>> dropped;
  double aux = 0, seq = 0, glob = 0, z = 0;
};

// Selection, probabilities and capacity of T tokens of logits l [T, E].
inline Ref ref_route(const ModelConfig& o, const Vec& l, int64_t T, const Vec& bias) {
  const int64_t E = *o.num_experts, k = o.moe_router_topk;
  const double scale = o.moe_router_topk_scaling_factor.value_or(1.0);
  Ref r{Vec(T * E, 0.0), std::vector<int>(T * E, 0), {}, {}};
  for (int64_t t = 0; t < T; ++t) {
    Vec row(l.begin() + t * E, l.begin() + (t + 1) * E), p(k);
    std::vector<int64_t> idx;
    if (o.moe_router_score_function == MoeScoreFunction::Softmax && o.moe_router_pre_softmax) {
      const Vec s = ref_softmax(row);
      idx = ref_choose(o, s);
      for (int64_t j = 0; j < k; ++j) p[j] = s[idx[j]];
    } else if (o.moe_router_score_function == MoeScoreFunction::Softmax) {
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
          return o.moe_token_drop_policy == MoeTokenDropPolicy::Probs ? r.probs[u * E + e] : double(r.map[u * E + e]);
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
inline void ref_aux_inputs(const ModelConfig& o, const Vec& l, int64_t T, const std::vector<int>& pad, Vec& A,
                    Vec& M) {
  const int64_t E = *o.num_experts;
  A.assign(T * E, 0.0);
  M.assign(T * E, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    if (!pad.empty() && pad[t]) continue;
    Vec row(l.begin() + t * E, l.begin() + (t + 1) * E), s(E);
    if (o.moe_router_score_function == MoeScoreFunction::Softmax) {
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
inline double ref_switch(double c, int64_t E, int64_t k, double T_tot, const Vec& P_sum, const Vec& N) {
  double s = 0;
  for (int64_t e = 0; e < E; ++e) s += P_sum[e] * N[e];
  return c * E / (k * T_tot * T_tot) * s;
}

// aux_loss, seq_aux_loss (S sequences of length... [S, B] tokens) and z-loss of one micro-batch.
inline void ref_losses(const ModelConfig& o, const Vec& l, int64_t S, int64_t B, const std::vector<int>& pad, bool has_mask,
                Ref& r) {
  const int64_t T = S * B, E = *o.num_experts, k = o.moe_router_topk;
  Vec A, M;
  ref_aux_inputs(o, l, T, pad, A, M);
  Vec Psum(E, 0.0), N(E, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) Psum[e] += A[t * E + e], N[e] += M[t * E + e];
  double Nsum = 0;
  for (double n : N) Nsum += n;
  if (o.moe_load_balancing_coeff("aux_loss") > 0)
    r.aux = ref_switch(o.moe_load_balancing_coeff("aux_loss"), E, k, has_mask ? Nsum / k : double(T), Psum, N);
  if (o.moe_load_balancing_coeff("seq_aux_loss") > 0) {
    const double T_seq = has_mask ? Nsum / double(k * B) : double(S);
    for (int64_t j = 0; j < B; ++j) {  // sequence j: tokens i·B + j
      Vec Pj(E, 0.0), Nj(E, 0.0);
      for (int64_t i = 0; i < S; ++i)
        for (int64_t e = 0; e < E; ++e) Pj[e] += A[(i * B + j) * E + e], Nj[e] += M[(i * B + j) * E + e];
      r.seq += ref_switch(o.moe_load_balancing_coeff("seq_aux_loss"), E, k, T_seq, Pj, Nj) / double(B);
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

inline Tensor f64(const Vec& v, const Shape& s) { return Tensor::from_vector(v, s, DType::F64); }

// route() of the resolved section o (its rules checked) on logits l of S x B tokens.
inline RoutingOutput run_route(const ModelConfig& o, const Vec& l, int64_t S, int64_t B, const Vec& bias,
                        const std::vector<int>& pad, GlobalAuxLossTracker* tracker = nullptr) {
  const ResolvedModelConfig cfg(o);
  RoutingInput in;
  in.logits = f64(l, {S * B, *o.num_experts});
  if (!bias.empty()) in.expert_bias = Tensor::from_vector(bias, {*o.num_experts}, DType::F32);
  if (!pad.empty()) in.padding_mask = Tensor::from_vector(Vec(pad.begin(), pad.end()), {S * B}, DType::U8);
  in.seq_length = S, in.batch = B;
  GlobalAuxLossTracker local;
  return route(cfg, in, RouterGroups{}, tracker ? tracker : &local, nullptr);
}

inline Vec random_vec(int64_t n, uint64_t seed, double lo = -2, double hi = 2) {
  return test::random_tensor({n}, seed, lo, hi).to_vector();
}

// Checks route() against ref_route on random logits (probs, map, top indices, dropped pairs,
// tokens per expert = a direct count of the map over non-padding tokens).
inline void check_selection(const ModelConfig& o, uint64_t seed, const std::vector<int>& pad = {}, bool with_bias = false) {
  const int64_t S = 5, B = 3, T = S * B, E = *o.num_experts, k = o.moe_router_topk;
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

}  // namespace strata::test::router_ref
