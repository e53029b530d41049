// CUDA router score function + top-k (kernels/moe_router.h); CPU reference kernels/cpu/moe_router.cpp.
// One warp per token, 8 tokens per 256-thread block. Forward: (pre-softmax) the row max and sum by
// warp reductions; then k passes, each lane taking its best expert strictly after the previous pick
// in the order "higher selection score, then lower expert id", combined across the warp by an xor
// butterfly on (score, id) that leaves the same pick in every lane; lane 0 then computes the k
// probabilities serially in pick order (the CPU's order). Backward: lanes write their columns'
// shares (zeros, or −s·dot for pre-softmax), then lane 0 adds the picked columns' terms.
// Deterministic: fixed reduction orders, no atomics. Reference: Megatron-Core
// moe_utils.topk_routing_with_score_function; models/layers/moe/routing.cpp (select_row).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_utils.h"
#include "core/half.h"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/moe_router.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kWarps = 8;
constexpr int kMaxTopk = 64;

struct Opts {
  RouterScore score;
  bool pre_softmax;
  int k;
  double scale;
};

template <typename A>
__device__ __forceinline__ A score_of(RouterScore f, A x) {
  if (f == RouterScore::Sigmoid) return A(1) / (A(1) + exp(-x));
  return sqrt(x > A(20) ? x : log1p(exp(x)));
}

template <typename A>
__device__ __forceinline__ A score_derivative(RouterScore f, A x) {
  const A sig = A(1) / (A(1) + exp(-x));
  if (f == RouterScore::Sigmoid) return sig * (A(1) - sig);
  return (x > A(20) ? A(1) : sig) / (A(2) * score_of(f, x));
}

// (va, a) before (vb, b) in the selection order; b < 0 means "nothing yet".
template <typename A>
__device__ __forceinline__ bool before(A va, int a, A vb, int b) {
  return b < 0 || (a >= 0 && (va > vb || (va == vb && a < b)));
}

// Row max and Σ exp(l − max) of a token's logits, identical in every lane.
template <typename T, typename A>
__device__ void softmax_stats(const T* l, int E, int lane, A& m, A& sum) {
  A mx = -INFINITY;
  for (int e = lane; e < E; e += 32) mx = fmax(mx, convert<A>(l[e]));
  m = rowred::warp_max(mx);
  A s = 0;
  for (int e = lane; e < E; e += 32) s += exp(convert<A>(l[e]) - m);
  sum = rowred::warp_sum(s);
}

template <typename T, typename A>
__device__ __forceinline__ A selection_score(const Opts& o, const T* l, const float* bias, int e, A m, A sum) {
  const A x = convert<A>(l[e]);
  if (o.score == RouterScore::Softmax) return o.pre_softmax ? exp(x - m) / sum : x;
  return score_of(o.score, x) + (bias ? static_cast<A>(bias[e]) : A(0));
}

template <typename T, typename A>
__global__ void router_topk_forward_kernel(const T* logits, const float* bias, Opts o, int64_t tokens, int E,
                                           T* top_probs, int64_t* top_indices) {
  __shared__ int picks[kWarps][kMaxTopk];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x * int64_t(kWarps) + warp;
  if (t >= tokens) return;  // whole warps leave together
  const T* l = logits + t * E;
  A m = 0, sum = 1;
  if (o.score == RouterScore::Softmax && o.pre_softmax) softmax_stats(l, E, lane, m, sum);
  A prev_v = 0;
  int prev = -1;
  for (int j = 0; j < o.k; ++j) {
    A best_v = 0;
    int best = -1;
    for (int e = lane; e < E; e += 32) {
      const A v = selection_score<T, A>(o, l, bias, e, m, sum);
      if (isnan(v) || (prev >= 0 && !before(prev_v, prev, v, e))) continue;
      if (before(v, e, best_v, best)) best_v = v, best = e;
    }
    for (int off = 16; off > 0; off >>= 1) {
      const A ov = __shfl_xor_sync(0xffffffffu, best_v, off);
      const int oi = __shfl_xor_sync(0xffffffffu, best, off);
      if (before(ov, oi, best_v, best)) best_v = ov, best = oi;
    }
    if (best >= 0) prev_v = best_v, prev = best;
    if (lane == 0) picks[warp][j] = best < 0 ? 0 : best;
  }
  __syncwarp();
  if (lane != 0) return;
  A p[kMaxTopk];
  A total = 0;
  for (int j = 0; j < o.k; ++j) {
    const A x = convert<A>(l[picks[warp][j]]);
    if (o.score == RouterScore::Softmax) p[j] = o.pre_softmax ? exp(x - m) / sum : x;
    else total += (p[j] = score_of(o.score, x));
  }
  if (o.score == RouterScore::Softmax && !o.pre_softmax) {  // softmax over the k picked logits
    A mx = p[0];
    for (int j = 1; j < o.k; ++j) mx = fmax(mx, p[j]);
    A s = 0;
    for (int j = 0; j < o.k; ++j) s += (p[j] = exp(p[j] - mx));
    for (int j = 0; j < o.k; ++j) p[j] /= s;
  } else if (o.score != RouterScore::Softmax && o.k > 1) {
    for (int j = 0; j < o.k; ++j) p[j] /= total + A(1e-20);
  }
  for (int j = 0; j < o.k; ++j) {
    top_probs[t * o.k + j] = convert<T>(p[j] * static_cast<A>(o.scale));
    top_indices[t * o.k + j] = picks[warp][j];
  }
}

template <typename T, typename A>
__global__ void router_topk_backward_kernel(const T* logits, const int64_t* top_indices, const T* dtop, Opts o,
                                            int64_t tokens, int E, T* dlogits) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x * int64_t(kWarps) + warp;
  if (t >= tokens) return;
  const T* l = logits + t * E;
  const int64_t* idx = top_indices + t * o.k;
  const T* g = dtop + t * o.k;
  T* dl = dlogits + t * E;
  const A scale = static_cast<A>(o.scale);
  auto in_range = [E](int64_t e) { return e >= 0 && e < E; };  // out-of-range picks are absent
  if (o.score == RouterScore::Softmax && o.pre_softmax) {
    A m, sum;
    softmax_stats(l, E, lane, m, sum);
    A dot = 0;  // Σ_j scale·g_j·s_j, serially in every lane (the CPU's order)
    for (int j = 0; j < o.k; ++j)
      if (in_range(idx[j])) dot += scale * convert<A>(g[j]) * (exp(convert<A>(l[idx[j]]) - m) / sum);
    for (int e = lane; e < E; e += 32) {
      const A s = exp(convert<A>(l[e]) - m) / sum;
      A v = -s * dot;
      for (int j = 0; j < o.k; ++j)
        if (idx[j] == e) v += s * scale * convert<A>(g[j]);
      dl[e] = convert<T>(v);
    }
    return;
  }
  for (int e = lane; e < E; e += 32) dl[e] = convert<T>(A(0));
  __syncwarp();
  if (lane != 0) return;
  A q[kMaxTopk];
  A sum = 0, dot = 0;
  if (o.score == RouterScore::Softmax) {
    A mx = -INFINITY;
    for (int j = 0; j < o.k; ++j) mx = fmax(mx, in_range(idx[j]) ? convert<A>(l[idx[j]]) : A(-INFINITY));
    for (int j = 0; j < o.k; ++j) sum += (q[j] = in_range(idx[j]) ? exp(convert<A>(l[idx[j]]) - mx) : A(0));
    for (int j = 0; j < o.k; ++j) dot += convert<A>(g[j]) * (q[j] /= sum);
    for (int j = 0; j < o.k; ++j)
      if (in_range(idx[j])) dl[idx[j]] = convert<T>(scale * q[j] * (convert<A>(g[j]) - dot));
    return;
  }
  for (int j = 0; j < o.k; ++j) sum += (q[j] = in_range(idx[j]) ? score_of(o.score, convert<A>(l[idx[j]])) : A(0));
  const A D = sum + A(1e-20);
  for (int j = 0; j < o.k; ++j) dot += convert<A>(g[j]) * q[j] / D;
  for (int j = 0; j < o.k; ++j) {
    if (!in_range(idx[j])) continue;
    const A gj = convert<A>(g[j]);
    const A dq = o.k > 1 ? scale * (gj - dot) / D : scale * gj;
    dl[idx[j]] = convert<T>(dq * score_derivative(o.score, convert<A>(l[idx[j]])));
  }
}

Opts opts_of(const MoeRouterTopkOptions& o) {
  return Opts{o.score, o.pre_softmax, static_cast<int>(o.topk), o.scaling_factor};
}

unsigned blocks_for(int64_t tokens) { return static_cast<unsigned>((tokens + kWarps - 1) / kWarps); }
}  // namespace

void moe_router_topk_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterTopkOptions& options,
                             const Tensor& top_probs, const Tensor& top_indices) {
  const int64_t T = logits.size(0);
  const int E = static_cast<int>(logits.size(1));
  cudaStream_t s = cuda_rt::current_stream(logits.device().index);
  const float* bias = expert_bias ? static_cast<const float*>(expert_bias->data_ptr()) : nullptr;
  dispatch_float(logits.dtype(), "moe_router_topk_forward", [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    using A = std::conditional_t<std::is_same_v<T_, double>, double, float>;
    router_topk_forward_kernel<T_, A><<<blocks_for(T), kWarps * 32, 0, s>>>(
        static_cast<const T_*>(logits.data_ptr()), bias, opts_of(options), T, E,
        static_cast<T_*>(top_probs.data_ptr()), static_cast<int64_t*>(top_indices.data_ptr()));
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void moe_router_topk_backward(const Tensor& logits, const Tensor& top_indices, const Tensor& dtop_probs,
                              const MoeRouterTopkOptions& options, const Tensor& dlogits) {
  const int64_t T = logits.size(0);
  const int E = static_cast<int>(logits.size(1));
  cudaStream_t s = cuda_rt::current_stream(logits.device().index);
  dispatch_float(logits.dtype(), "moe_router_topk_backward", [&](auto tag) {
    using T_ = typename decltype(tag)::type;
    using A = std::conditional_t<std::is_same_v<T_, double>, double, float>;
    router_topk_backward_kernel<T_, A><<<blocks_for(T), kWarps * 32, 0, s>>>(
        static_cast<const T_*>(logits.data_ptr()), static_cast<const int64_t*>(top_indices.data_ptr()),
        static_cast<const T_*>(dtop_probs.data_ptr()), opts_of(options), T, E, static_cast<T_*>(dlogits.data_ptr()));
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::kernels::cuda
