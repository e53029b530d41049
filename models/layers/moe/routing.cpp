// Routing forward/backward (see routing.h): score functions, top-k with group limits, scaling,
// expert bias, capacity and token dropping; the losses are in routing_losses.cpp.
// Reference: megatron/core/transformer/moe/moe_utils.py (topk_routing_with_score_function,
// group_limited_topk, apply_router_token_dropping, get_capacity, get_updated_expert_bias).
#include "models/layers/moe/routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "models/layers/moe/routing_detail.h"

namespace strata::layers::moe {

namespace detail {

void topk_desc(const double* v, int64_t n, int64_t k, const uint8_t* allowed, int64_t* out) {
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (!allowed || allowed[i]) ids.push_back(i);
  STRATA_INTERNAL_ASSERT(static_cast<int64_t>(ids.size()) >= k, "top-k of ", k, " from ", ids.size());
  auto before = [v](int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
  std::copy(ids.begin(), ids.begin() + k, out);
}

double score_of(MoeScoreFunction f, double x) {
  if (f == MoeScoreFunction::Sigmoid) return 1.0 / (1.0 + std::exp(-x));
  const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));  // torch's threshold 20
  return std::sqrt(softplus);
}

double score_derivative(MoeScoreFunction f, double x) {
  const double sig = 1.0 / (1.0 + std::exp(-x));
  if (f == MoeScoreFunction::Sigmoid) return sig * (1.0 - sig);
  return (x > 20.0 ? 1.0 : sig) / (2.0 * score_of(f, x));
}

void softmax_row(const double* l, int64_t n, double* out) {
  const double m = *std::max_element(l, l + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (out[i] = std::exp(l[i] - m));
  for (int64_t i = 0; i < n; ++i) out[i] /= sum;
}

double logsumexp_row(const double* l, int64_t n) {
  const double m = *std::max_element(l, l + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(l[i] - m);
  return m + std::log(sum);
}

}  // namespace detail

namespace {

using detail::topk_desc;

// Top-k of selection scores v [E], group-limited when moe_router_group_topk is set: group score =
// sum of the top-(k / g) scores of the group, the top-g groups stay, top-k over their experts.
void choose(const ResolvedModelConfig& cfg, const double* v, int64_t* idx) {
  const int64_t E = *cfg->num_experts, k = cfg->moe_router_topk;
  if (!cfg->moe_router_group_topk || *cfg->moe_router_group_topk == 0) return topk_desc(v, E, k, nullptr, idx);
  const int64_t G = *cfg->moe_router_num_groups, g = *cfg->moe_router_group_topk, m = E / G, per = k / g;
  std::vector<double> group_score(static_cast<size_t>(G));
  std::vector<int64_t> best(static_cast<size_t>(per));
  for (int64_t gi = 0; gi < G; ++gi) {
    topk_desc(v + gi * m, m, per, nullptr, best.data());
    double s = 0;
    for (int64_t j = 0; j < per; ++j) s += v[gi * m + best[j]];
    group_score[gi] = s;
  }
  std::vector<int64_t> groups(static_cast<size_t>(g));
  topk_desc(group_score.data(), G, g, nullptr, groups.data());
  std::vector<uint8_t> allowed(static_cast<size_t>(E), 0);
  for (int64_t gi : groups) std::fill(allowed.begin() + gi * m, allowed.begin() + (gi + 1) * m, 1);
  topk_desc(v, E, k, allowed.data(), idx);
}

// Selection and probabilities of one token: idx [k], p [k].
void select_row(const ResolvedModelConfig& cfg, const double* l, const float* bias, int64_t* idx, double* p) {
  const int64_t E = *cfg->num_experts, k = cfg->moe_router_topk;
  const double scale = cfg->moe_router_topk_scaling_factor.value_or(1.0);
  std::vector<double> s(static_cast<size_t>(E));
  if (cfg->moe_router_score_function == MoeScoreFunction::Softmax) {
    if (cfg->moe_router_pre_softmax) {
      detail::softmax_row(l, E, s.data());
      choose(cfg, s.data(), idx);
      for (int64_t j = 0; j < k; ++j) p[j] = s[idx[j]];
    } else {
      choose(cfg, l, idx);
      for (int64_t j = 0; j < k; ++j) s[j] = l[idx[j]];
      detail::softmax_row(s.data(), k, p);
    }
  } else {
    for (int64_t e = 0; e < E; ++e) s[e] = detail::score_of(cfg->moe_router_score_function, l[e]);
    if (bias) {
      std::vector<double> biased(s);
      for (int64_t e = 0; e < E; ++e) biased[e] += static_cast<double>(bias[e]);
      choose(cfg, biased.data(), idx);
    } else {
      choose(cfg, s.data(), idx);
    }
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += (p[j] = s[idx[j]]);
    if (k > 1)
      for (int64_t j = 0; j < k; ++j) p[j] /= sum + 1e-20;
  }
  for (int64_t j = 0; j < k; ++j) p[j] *= scale;
}

// d(logits) of one token from g [k] = d(probs) at its selected experts (recomputes the forward
// with the saved selection options).
void select_row_backward(const RoutingSaved& sv, const double* l, const int64_t* idx, const double* g, double* dl) {
  const int64_t E = sv.E, k = sv.k;
  const double scale = sv.scaling_factor;
  std::vector<double> s(static_cast<size_t>(E)), q(static_cast<size_t>(k));
  if (sv.score_function == MoeScoreFunction::Softmax && sv.pre_softmax) {
    detail::softmax_row(l, E, s.data());
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += scale * g[j] * s[idx[j]];
    for (int64_t e = 0; e < E; ++e) dl[e] -= s[e] * dot;
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += s[idx[j]] * scale * g[j];
  } else if (sv.score_function == MoeScoreFunction::Softmax) {
    for (int64_t j = 0; j < k; ++j) s[j] = l[idx[j]];
    detail::softmax_row(s.data(), k, q.data());
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += g[j] * q[j];
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += scale * q[j] * (g[j] - dot);
  } else {
    double sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) sum += (q[j] = detail::score_of(sv.score_function, l[idx[j]]));
    const double D = sum + 1e-20;
    for (int64_t j = 0; j < k; ++j) dot += g[j] * q[j] / D;
    for (int64_t j = 0; j < k; ++j) {
      const double dq = k > 1 ? scale * (g[j] - dot) / D : scale * g[j];
      dl[idx[j]] += dq * detail::score_derivative(sv.score_function, l[idx[j]]);
    }
  }
}

// Capacity mask [T, E]: per expert the `cap` tokens with the largest key (probs, or
// the routing map for the position policy), ties to the lower token index.
std::vector<uint8_t> capacity_mask(const ResolvedModelConfig& cfg, const std::vector<double>& probs,
                                   const std::vector<uint8_t>& map, int64_t T, int64_t cap) {
  const int64_t E = *cfg->num_experts;
  std::vector<uint8_t> mask(static_cast<size_t>(T * E), cap > T ? 1 : 0);
  if (cap > T) return mask;
  const bool by_probs = cfg->moe_token_drop_policy == MoeTokenDropPolicy::Probs;
  std::vector<int64_t> tokens(static_cast<size_t>(T));
  for (int64_t e = 0; e < E; ++e) {
    auto key = [&](int64_t t) { return by_probs ? probs[t * E + e] : static_cast<double>(map[t * E + e]); };
    std::iota(tokens.begin(), tokens.end(), 0);
    std::stable_sort(tokens.begin(), tokens.end(), [&](int64_t a, int64_t b) { return key(a) > key(b); });
    for (int64_t i = 0; i < cap; ++i) mask[tokens[i] * E + e] = 1;
  }
  return mask;
}

void check_input(const ResolvedModelConfig& cfg, const RoutingInput& in, int64_t& s, int64_t& b) {
  const int64_t E = *cfg->num_experts;
  STRATA_CHECK(in.logits.dim() == 2 && in.logits.size(1) == E, "router: logits must be [T, ", E, "], got ",
               in.logits.shape().str());
  const int64_t T = in.logits.size(0);
  s = in.seq_length, b = in.batch;
  if (s == 0 && b == 0) s = T, b = 1;
  STRATA_CHECK(s * b == T, "router: ", T, " tokens are not seq_length ", s, " x batch ", b);
  if (in.padding_mask.defined())
    STRATA_CHECK(in.padding_mask.numel() == T, "router: padding_mask has ", in.padding_mask.numel(),
                 " entries for ", T, " tokens");
  if (in.expert_bias.defined())
    STRATA_CHECK(in.expert_bias.numel() == E && in.expert_bias.dtype() == DType::F32, "router: expert_bias must be [",
                 E, "] f32");
}

// The selection of every token: top_indices [T, k], probabilities [T, k] rounded to dtype.
void select_all(const ResolvedModelConfig& cfg, const RoutingInput& in, const std::vector<double>& l, int64_t T,
                std::vector<int64_t>& idx, std::vector<double>& p) {
  const int64_t E = *cfg->num_experts, k = cfg->moe_router_topk;
  const bool biased = in.expert_bias.defined() && cfg->moe_router_score_function != MoeScoreFunction::Softmax;
  const Tensor bias = biased ? in.expert_bias.to(Device::cpu()).contiguous() : Tensor();
  idx.assign(static_cast<size_t>(T * k), 0);
  p.assign(static_cast<size_t>(T * k), 0.0);
  for (int64_t t = 0; t < T; ++t)
    select_row(cfg, &l[t * E], biased ? bias.data<float>() : nullptr, &idx[t * k], &p[t * k]);
  p = Tensor::from_vector(p, {T, k}, in.logits.dtype()).to_vector();  // probs.type_as(logits)
}

}  // namespace

int64_t expert_capacity(int64_t tokens, int64_t topk, int64_t experts, double capacity_factor) {
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(tokens * topk) / static_cast<double>(experts) * capacity_factor));
}

RoutingOutput route(const ResolvedModelConfig& cfg, const RoutingInput& in, const RouterGroups& groups,
                    GlobalAuxLossTracker* tracker, RoutingSaved* saved) {
  int64_t S = 0, B = 0;
  check_input(cfg, in, S, B);
  const int64_t T = in.logits.size(0), E = *cfg->num_experts, k = cfg->moe_router_topk;
  const DType dt = in.logits.dtype();
  RoutingSaved sv;
  sv.T = T, sv.E = E, sv.k = k, sv.batch = B, sv.dtype = dt;
  sv.score_function = cfg->moe_router_score_function;
  sv.pre_softmax = cfg->moe_router_pre_softmax;
  sv.scaling_factor = cfg->moe_router_topk_scaling_factor.value_or(1.0);
  sv.logits = in.logits.to_vector();
  if (in.padding_mask.defined())
    for (double v : in.padding_mask.to_vector()) sv.padding.push_back(v != 0 ? 1 : 0);
  auto is_pad = [&](int64_t t) { return !sv.padding.empty() && sv.padding[t]; };

  RoutingOutput out;
  std::vector<double> top_p;
  select_all(cfg, in, sv.logits, T, sv.top_indices, top_p);
  std::vector<double> probs(static_cast<size_t>(T * E), 0.0);
  std::vector<uint8_t> map(static_cast<size_t>(T * E), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      probs[t * E + sv.top_indices[t * k + j]] = top_p[t * k + j];
      map[t * E + sv.top_indices[t * k + j]] = 1;
    }
  sv.final_map = map;
  if (cfg->moe_expert_capacity_factor && in.mode != RoutingMode::Inference) {
    out.capacity = expert_capacity(T, k, E, *cfg->moe_expert_capacity_factor);
    const std::vector<uint8_t> mask = capacity_mask(cfg, probs, map, T, out.capacity);
    for (int64_t i = 0; i < T * E; ++i) {
      sv.final_map[i] = cfg->moe_pad_expert_input_to_capacity ? mask[i] : (map[i] && mask[i]);
      if (map[i] && !sv.final_map[i]) out.dropped.emplace_back(i / E, i % E);
      if (!sv.final_map[i]) probs[i] = 0.0;
    }
  }
  std::vector<double> kept(static_cast<size_t>(T * k)), counts(static_cast<size_t>(E), 0.0), idx_d(kept.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      kept[t * k + j] = sv.final_map[t * E + sv.top_indices[t * k + j]];
      idx_d[t * k + j] = static_cast<double>(sv.top_indices[t * k + j]);
    }
    if (!is_pad(t)) {
      ++out.valid_tokens;
      for (int64_t e = 0; e < E; ++e) counts[e] += sv.final_map[t * E + e];
    }
  }
  if (in.mode == RoutingMode::Training) detail::aux_losses_forward(cfg, in, groups, tracker, sv.logits, sv.padding, out, sv);
  std::vector<double> map_d(sv.final_map.begin(), sv.final_map.end());
  out.probs = Tensor::from_vector(probs, {T, E}, dt);
  out.routing_map = Tensor::from_vector(map_d, {T, E}, DType::U8);
  out.top_indices = Tensor::from_vector(idx_d, {T, k}, DType::I64);
  out.top_probs = Tensor::from_vector(top_p, {T, k}, dt);
  out.top_kept = Tensor::from_vector(kept, {T, k}, DType::U8);
  out.tokens_per_expert = Tensor::from_vector(counts, {E}, DType::F64);
  if (saved) *saved = std::move(sv);
  return out;
}

Tensor route_backward(const RoutingSaved& s, const Tensor& dprobs, const RoutingLossGrads& grads) {
  const int64_t T = s.T, E = s.E, k = s.k;
  STRATA_CHECK(dprobs.dim() == 2 && dprobs.size(0) == T && dprobs.size(1) == E, "router backward: d(probs) must be [",
               T, ", ", E, "], got ", dprobs.shape().str());
  const std::vector<double> dp = dprobs.to_vector();
  std::vector<double> dl(static_cast<size_t>(T * E), 0.0), g(static_cast<size_t>(k));
  for (int64_t t = 0; t < T; ++t) {
    bool any = false;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = t * E + s.top_indices[t * k + j];
      g[j] = s.final_map[i] ? dp[i] : 0.0;  // probs = selected probs ⊙ final map
      any = any || g[j] != 0.0;
    }
    if (any) select_row_backward(s, &s.logits[t * E], &s.top_indices[t * k], g.data(), &dl[t * E]);
  }
  detail::aux_losses_backward(s, grads, dl);
  return Tensor::from_vector(dl, {T, E}, s.dtype);
}

Tensor route_backward_topk(const RoutingSaved& s, const Tensor& dtop, const RoutingLossGrads& grads) {
  STRATA_CHECK(dtop.dim() == 2 && dtop.size(0) == s.T && dtop.size(1) == s.k,
               "router backward: d(top_probs) must be [", s.T, ", ", s.k, "], got ", dtop.shape().str());
  const std::vector<double> g = dtop.to_vector();
  std::vector<double> dense(static_cast<size_t>(s.T * s.E), 0.0);
  for (int64_t t = 0; t < s.T; ++t)
    for (int64_t j = 0; j < s.k; ++j) dense[t * s.E + s.top_indices[t * s.k + j]] = g[t * s.k + j];
  return route_backward(s, Tensor::from_vector(dense, {s.T, s.E}, DType::F64), grads);
}

Tensor updated_expert_bias(const Tensor& counts, const Tensor& bias, double rate) {
  STRATA_CHECK(counts.numel() == bias.numel(), "expert bias update: ", counts.numel(), " counts for ", bias.numel(),
               " experts");
  const std::vector<double> c = counts.to_vector();
  std::vector<double> b = bias.to_vector();
  const double mean = std::accumulate(c.begin(), c.end(), 0.0) / static_cast<double>(c.size());
  for (size_t e = 0; e < b.size(); ++e) {
    const double off = mean - c[e];
    b[e] = static_cast<float>(b[e] + (off > 0 ? rate : off < 0 ? -rate : 0.0));
  }
  return Tensor::from_vector(b, bias.shape(), DType::F32);
}

}  // namespace strata::layers::moe
