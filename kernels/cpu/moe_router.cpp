// CPU router score function + top-k (kernels/moe_router.h): the readable reference, one token per
// loop iteration (OpenMP over tokens; each token's result is computed by one thread in a fixed
// order, so it does not depend on the thread count). Math in acc_t = f32 (f64 for f64 logits).
// Selection: k passes, pass j takes the best score strictly after pick j-1 in the total order
// "higher score first, then lower expert id" — the sorted top-k with the lower-id tie rule,
// without marking picked experts. Reference: megatron/core/transformer/moe/moe_utils.py
// (topk_routing_with_score_function), models/layers/moe/routing.cpp (select_row, its backward).
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/moe_router.h"

namespace strata::kernels::cpu {
namespace {
constexpr int64_t kParallelTokens = 64;

template <typename A>
A score_of(RouterScore f, A x) {
  if (f == RouterScore::Sigmoid) return A(1) / (A(1) + std::exp(-x));
  return std::sqrt(x > A(20) ? x : std::log1p(std::exp(x)));
}

template <typename A>
A score_derivative(RouterScore f, A x) {
  const A sig = A(1) / (A(1) + std::exp(-x));
  if (f == RouterScore::Sigmoid) return sig * (A(1) - sig);
  return (x > A(20) ? A(1) : sig) / (A(2) * score_of(f, x));
}

// v[a] before v[b] in the selection order (NaN never before anything).
template <typename A>
bool before(const A* v, int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

// The k best of v[0..n) in the selection order. NaN entries are never picked; a pick with no
// non-NaN entry left is expert 0 (so the indices stay in range).
template <typename A>
void select_topk(const A* v, int64_t n, int64_t k, int64_t* idx) {
  int64_t prev = -1;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      if (std::isnan(v[e]) || (prev >= 0 && !before(v, prev, e))) continue;
      if (best < 0 || before(v, e, best)) best = e;
    }
    idx[j] = best < 0 ? 0 : best;
    prev = best < 0 ? prev : best;
  }
}

template <typename A>
void softmax(const A* l, int64_t n, A* out) {
  A m = l[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, l[i]);
  A sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (out[i] = std::exp(l[i] - m));
  for (int64_t i = 0; i < n; ++i) out[i] /= sum;
}

// One token: l [E] -> idx [k], p [k] (acc precision).
template <typename A>
void forward_row(const MoeRouterTopkOptions& o, const A* l, const float* bias, int64_t E, A* s, int64_t* idx, A* p) {
  const int64_t k = o.topk;
  if (o.score == RouterScore::Softmax && o.pre_softmax) {
    softmax(l, E, s);
    select_topk(s, E, k, idx);
    for (int64_t j = 0; j < k; ++j) p[j] = s[idx[j]];
  } else if (o.score == RouterScore::Softmax) {
    select_topk(l, E, k, idx);
    for (int64_t j = 0; j < k; ++j) s[j] = l[idx[j]];
    softmax(s, k, p);
  } else {
    for (int64_t e = 0; e < E; ++e) s[e] = score_of(o.score, l[e]) + (bias ? static_cast<A>(bias[e]) : A(0));
    select_topk(s, E, k, idx);
    A sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += (p[j] = score_of(o.score, l[idx[j]]));
    if (k > 1)
      for (int64_t j = 0; j < k; ++j) p[j] /= sum + A(1e-20);
  }
  for (int64_t j = 0; j < k; ++j) p[j] *= static_cast<A>(o.scaling_factor);
}

// One token: d(logits) [E] (overwritten) from g [k] = d(top probs).
template <typename A>
void backward_row(const MoeRouterTopkOptions& o, const A* l, const int64_t* idx, const A* g, int64_t E, A* s, A* dl) {
  const int64_t k = o.topk;
  const A scale = static_cast<A>(o.scaling_factor);
  for (int64_t e = 0; e < E; ++e) dl[e] = 0;
  if (o.score == RouterScore::Softmax && o.pre_softmax) {
    softmax(l, E, s);
    A dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += scale * g[j] * s[idx[j]];
    for (int64_t e = 0; e < E; ++e) dl[e] = -s[e] * dot;
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += s[idx[j]] * scale * g[j];
  } else if (o.score == RouterScore::Softmax) {
    std::vector<A> top(k), q(k);
    for (int64_t j = 0; j < k; ++j) top[j] = l[idx[j]];
    softmax(top.data(), k, q.data());
    A dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += g[j] * q[j];
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += scale * q[j] * (g[j] - dot);
  } else {
    A sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) sum += (s[j] = score_of(o.score, l[idx[j]]));
    const A D = sum + A(1e-20);
    for (int64_t j = 0; j < k; ++j) dot += g[j] * s[j] / D;
    for (int64_t j = 0; j < k; ++j) {
      const A dq = k > 1 ? scale * (g[j] - dot) / D : scale * g[j];
      dl[idx[j]] += dq * score_derivative(o.score, l[idx[j]]);
    }
  }
}

void check_indices(const Tensor& top_indices, int64_t E) {
  const int64_t* p = static_cast<const int64_t*>(top_indices.data_ptr());
  for (int64_t i = 0; i < top_indices.numel(); ++i)
    STRATA_CHECK(p[i] >= 0 && p[i] < E, "moe_router_topk_backward: top_indices entry ", i, " = ", p[i],
                 " is outside the experts [0, ", E, ")");
}
}  // namespace

void moe_router_topk_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterTopkOptions& o,
                             const Tensor& top_probs, const Tensor& top_indices) {
  const int64_t T = logits.size(0), E = logits.size(1), k = o.topk;
  const float* bias = expert_bias ? static_cast<const float*>(expert_bias->data_ptr()) : nullptr;
  dispatch_float(logits.dtype(), "moe_router_topk_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using A = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* lp = static_cast<const scalar_t*>(logits.data_ptr());
    scalar_t* pp = static_cast<scalar_t*>(top_probs.data_ptr());
    int64_t* ip = static_cast<int64_t*>(top_indices.data_ptr());
#pragma omp parallel if (T > kParallelTokens)
    {
      std::vector<A> l(E), s(E), p(k);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < E; ++e) l[e] = convert<A>(lp[t * E + e]);
        forward_row(o, l.data(), bias, E, s.data(), ip + t * k, p.data());
        for (int64_t j = 0; j < k; ++j) pp[t * k + j] = convert<scalar_t>(p[j]);
      }
    }
  });
}

void moe_router_topk_backward(const Tensor& logits, const Tensor& top_indices, const Tensor& dtop_probs,
                              const MoeRouterTopkOptions& o, const Tensor& dlogits) {
  const int64_t T = logits.size(0), E = logits.size(1), k = o.topk;
  check_indices(top_indices, E);
  dispatch_float(logits.dtype(), "moe_router_topk_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using A = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* lp = static_cast<const scalar_t*>(logits.data_ptr());
    const scalar_t* gp = static_cast<const scalar_t*>(dtop_probs.data_ptr());
    const int64_t* ip = static_cast<const int64_t*>(top_indices.data_ptr());
    scalar_t* dp = static_cast<scalar_t*>(dlogits.data_ptr());
#pragma omp parallel if (T > kParallelTokens)
    {
      std::vector<A> l(E), s(E), g(k), dl(E);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < E; ++e) l[e] = convert<A>(lp[t * E + e]);
        for (int64_t j = 0; j < k; ++j) g[j] = convert<A>(gp[t * k + j]);
        backward_row(o, l.data(), ip + t * k, g.data(), E, s.data(), dl.data());
        for (int64_t e = 0; e < E; ++e) dp[t * E + e] = convert<scalar_t>(dl[e]);
      }
    }
  });
}

}  // namespace strata::kernels::cpu
