// CUDA mHC mapping computation and Sinkhorn (kernels/mhc.h; the `use_fused_mhc` kernels); CPU
// reference in kernels/cpu/mhc.cpp. Straightforward, deterministic (fixed-order sums, no atomics):
// - mappings forward: one block per token: the projection x·Wᵀ and Σx² as f32 block sums (f32
//   partial sums), then the norm factor, gates and bias (projection + RMS + mapping fused);
// - mappings backward: one block per token for d(h) and g_x; g_w one thread per weight summing over
//   tokens; g_bias / g_alpha one thread per output row;
// - the unfused path's gate op (mhc_compute_h): one thread per token;
// - Sinkhorn forward / backward: one thread per matrix (kernels/mhc_math.h), the trace of the
//   unrolled iterations in a global workspace.
// Math in f32 (f64 for f64 activations).
#include "core/cuda/cuda_utils.h"
#include "core/half.h"
#include "kernels/cuda/mhc_dispatch.cuh"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/mhc.h"
#include "kernels/mhc_math.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kThreads = 256;

struct MapDims {
  int64_t T, K, n, m;
  bool inside;
  double eps;
};
MapDims map_dims(const Tensor& x, const MhcMappingOptions& o) {
  return {x.size(0), x.size(1), o.n, o.n * o.n + 2 * o.n, o.norm_eps_inside_sqrt, o.norm_eps};
}
__device__ int64_t alpha_group(int64_t k, int64_t n) { return k < n ? 0 : (k < 2 * n ? 1 : 2); }

// Sum over the block (f32 partial sums for f32: each thread's part and their combination in f32).
template <typename T>
__device__ T block_sum(T v, rowred::Scratch<kThreads, T>& s) {
  return rowred::row_sum<kThreads, T>(v, s);
}

template <typename T>
__device__ T norm_factor(T ss, const MapDims& d) {
  if (d.inside) return T(1) / sqrt(ss / T(d.K) + T(d.eps));
  return T(1) / (sqrt(ss) / sqrt(T(d.K)) + T(d.eps));
}

template <typename A, typename T>
__global__ void mappings_fwd_kernel(const A* x, const T* w, const T* alpha, const T* bias, MapDims d, T* pre, T* post,
                                    T* res, T* proj, T* rinv) {
  __shared__ rowred::Scratch<kThreads, T> s;
  const int64_t t = blockIdx.x;
  const A* xr = x + t * d.K;
  T ss = 0;
  for (int64_t c = threadIdx.x; c < d.K; c += blockDim.x) ss += convert<T>(xr[c]) * convert<T>(xr[c]);
  ss = block_sum(ss, s);
  const T r = norm_factor(ss, d);
  if (threadIdx.x == 0) rinv[t] = r;
  for (int64_t k = 0; k < d.m; ++k) {
    T p = 0;
    for (int64_t c = threadIdx.x; c < d.K; c += blockDim.x) p += convert<T>(xr[c]) * w[k * d.K + c];
    p = block_sum(p, s);
    if (threadIdx.x != 0) continue;
    proj[t * d.m + k] = p;
    const T h = r * p * alpha[alpha_group(k, d.n)] + bias[k];
    if (k < d.n) pre[t * d.n + k] = mhc_math::sigmoid(h) + T(kMhcPreEps);
    else if (k < 2 * d.n) post[t * d.n + k - d.n] = T(2) * mhc_math::sigmoid(h);
    else res[t * d.n * d.n + k - 2 * d.n] = h;
  }
}

// Per token: dh [T, m], dh·proj·rinv [T, m] (for g_alpha), dproj [T, m]; g_x += slope·x + dproj·W.
template <typename A, typename T>
__global__ void mappings_bwd_token_kernel(const A* x, const T* w, const T* alpha, const T* bias, const T* proj,
                                          const T* rinv, MapDims d, const T* gpre, const T* gpost, const T* gres,
                                          T* dh_out, T* dha_out, T* dproj, T* gx) {
  __shared__ rowred::Scratch<kThreads, T> s;
  __shared__ T drinv_s;
  const int64_t t = blockIdx.x;
  const A* xr = x + t * d.K;
  const T r = rinv[t];
  if (threadIdx.x == 0) {
    T drinv = 0;
    for (int64_t k = 0; k < d.m; ++k) {
      const T a = alpha[alpha_group(k, d.n)], p = proj[t * d.m + k], h = r * p * a + bias[k];
      const T sg = mhc_math::sigmoid(h);
      T dh;
      if (k < d.n) dh = gpre[t * d.n + k] * sg * (T(1) - sg);
      else if (k < 2 * d.n) dh = T(2) * gpost[t * d.n + k - d.n] * sg * (T(1) - sg);
      else dh = gres[t * d.n * d.n + k - 2 * d.n];
      dh_out[t * d.m + k] = dh;
      dha_out[t * d.m + k] = dh * p * r;
      dproj[t * d.m + k] = dh * a * r;
      drinv += dh * p * a;
    }
    drinv_s = drinv;
  }
  T ss = 0;
  for (int64_t c = threadIdx.x; c < d.K; c += blockDim.x) ss += convert<T>(xr[c]) * convert<T>(xr[c]);
  ss = block_sum(ss, s);  // synchronises the block, so drinv_s and dproj are visible
  T slope;
  if (d.inside) slope = -r * r * r / T(d.K);
  else slope = sqrt(ss) > T(0) ? -r * r / (sqrt(ss) * sqrt(T(d.K))) : T(0);
  slope *= drinv_s;
  for (int64_t c = threadIdx.x; c < d.K; c += blockDim.x) {
    T acc = slope * convert<T>(xr[c]);
    for (int64_t k = 0; k < d.m; ++k) acc += dproj[t * d.m + k] * w[k * d.K + c];
    gx[t * d.K + c] += acc;
  }
}

template <typename A, typename T>
__global__ void mappings_bwd_w_kernel(const A* x, const T* dproj, MapDims d, T* gw) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d.m * d.K) return;
  const int64_t k = i / d.K, c = i % d.K;
  T acc = 0;
  for (int64_t t = 0; t < d.T; ++t) acc += dproj[t * d.m + k] * convert<T>(x[t * d.K + c]);
  gw[i] += acc;
}

template <typename T>
__global__ void mappings_bwd_params_kernel(const T* dh, const T* dha, MapDims d, T* gbias, T* galpha) {
  const int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (k < d.m) {
    T acc = 0;
    for (int64_t t = 0; t < d.T; ++t) acc += dh[t * d.m + k];
    gbias[k] += acc;
  }
  if (k < 3) {
    const int64_t lo = k == 0 ? 0 : (k == 1 ? d.n : 2 * d.n), hi = k == 0 ? d.n : (k == 1 ? 2 * d.n : d.m);
    T acc = 0;
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t j = lo; j < hi; ++j) acc += dha[t * d.m + j];
    galpha[k] += acc;
  }
}

// The unfused gate op, one thread per token (kernels/mhc_math.h gates_forward / gates_backward).
template <typename T>
__global__ void compute_h_fwd_kernel(const T* proj, const T* ss, const T* alpha, const T* bias, MapDims d, T* pre,
                                     T* post, T* res, T* rinv) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= d.T) return;
  const T r = mhc_math::norm_factor(ss[t], d.K, d.inside, T(d.eps));
  rinv[t] = r;
  mhc_math::gates_forward(proj + t * d.m, r, alpha, bias, d.n, T(kMhcPreEps), pre + t * d.n, post + t * d.n,
                          res + t * d.n * d.n);
}
template <typename T>
__global__ void compute_h_bwd_kernel(const T* proj, const T* ss, const T* alpha, const T* bias, MapDims d,
                                     const T* gpre, const T* gpost, const T* gres, T* dh, T* dha, T* dproj, T* gss) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= d.T) return;
  const T r = mhc_math::norm_factor(ss[t], d.K, d.inside, T(d.eps));
  const T drinv = mhc_math::gates_backward(proj + t * d.m, r, alpha, bias, d.n, gpre + t * d.n, gpost + t * d.n,
                                           gres + t * d.n * d.n, dh + t * d.m, dproj + t * d.m);
  for (int64_t k = 0; k < d.m; ++k) dha[t * d.m + k] = dh[t * d.m + k] * proj[t * d.m + k] * r;
  gss[t] = drinv * mhc_math::norm_factor_dss(ss[t], r, d.K, d.inside);
}

template <typename T>
__global__ void sinkhorn_fwd_kernel(const T* L, int64_t T_, int64_t n, int64_t iters, T eps, T* out, T* trace) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T_) return;
  mhc_math::sinkhorn_forward_matrix(L + t * n * n, n, iters, eps, out + t * n * n,
                                    trace + t * mhc_math::sinkhorn_trace_size(n, iters));
}
template <typename T>
__global__ void sinkhorn_bwd_kernel(const T* L, int64_t T_, int64_t n, int64_t iters, T eps, const T* g, T* gL,
                                    T* trace) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T_) return;
  mhc_math::sinkhorn_backward_matrix(L + t * n * n, n, iters, eps, g + t * n * n, gL + t * n * n,
                                     trace + t * mhc_math::sinkhorn_trace_size(n, iters));
}

using mhc_dispatch::as_acc;
using mhc_dispatch::by_act;
using mhc_dispatch::store_back;
}  // namespace

void mhc_mappings_forward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                          const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                          const Tensor& h_res_logits, const Tensor& proj, const Tensor& rinv) {
  const MapDims d = map_dims(x, o);
  if (d.T == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  by_act(x.dtype(), [&](auto at, auto tt) {
    using A = typename decltype(at)::type;
    using T = typename decltype(tt)::type;
    mappings_fwd_kernel<A, T><<<static_cast<unsigned>(d.T), kThreads, 0, s>>>(
        x.data<A>(), w.data<T>(), alpha.data<T>(), bias.data<T>(), d, h_pre.data<T>(), h_post.data<T>(),
        h_res_logits.data<T>(), proj.data<T>(), rinv.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void mhc_mappings_backward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                           const Tensor& proj, const Tensor& rinv, const MhcMappingOptions& o, const Tensor& g_pre,
                           const Tensor& g_post, const Tensor& g_res_logits, const Tensor& g_x, const Tensor& g_w,
                           const Tensor& g_alpha, const Tensor& g_bias) {
  const MapDims d = map_dims(x, o);
  if (d.T == 0) return;
  const DType ad = w.dtype();
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  Tensor dh = Tensor::empty({d.T, d.m}, ad, x.device()), dha = Tensor::empty({d.T, d.m}, ad, x.device());
  Tensor dproj = Tensor::empty({d.T, d.m}, ad, x.device());
  Tensor gx = as_acc(g_x, ad), gw = as_acc(g_w, ad), ga = as_acc(g_alpha, ad), gb = as_acc(g_bias, ad);
  by_act(x.dtype(), [&](auto at, auto tt) {
    using A = typename decltype(at)::type;
    using T = typename decltype(tt)::type;
    mappings_bwd_token_kernel<A, T><<<static_cast<unsigned>(d.T), kThreads, 0, s>>>(
        x.data<A>(), w.data<T>(), alpha.data<T>(), bias.data<T>(), proj.data<T>(), rinv.data<T>(), d,
        g_pre.data<T>(), g_post.data<T>(), g_res_logits.data<T>(), dh.data<T>(), dha.data<T>(), dproj.data<T>(),
        gx.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
    mappings_bwd_w_kernel<A, T><<<cuda_rt::grid_for(d.m * d.K, kThreads), kThreads, 0, s>>>(x.data<A>(),
                                                                                           dproj.data<T>(), d,
                                                                                           gw.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
    mappings_bwd_params_kernel<T><<<cuda_rt::grid_for(d.m, 64), 64, 0, s>>>(dh.data<T>(), dha.data<T>(), d,
                                                                          gb.data<T>(), ga.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
  store_back(g_x, gx), store_back(g_w, gw), store_back(g_alpha, ga), store_back(g_bias, gb);
}

void mhc_compute_h_forward(const Tensor& proj, const Tensor& sumsq, const Tensor& alpha, const Tensor& bias,
                           int64_t K, const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                           const Tensor& h_res_logits, const Tensor& rinv) {
  const MapDims d{proj.size(0), K, o.n, o.n * o.n + 2 * o.n, o.norm_eps_inside_sqrt, o.norm_eps};
  if (d.T == 0) return;
  cudaStream_t s = cuda_rt::current_stream(proj.device().index);
  by_act(proj.dtype(), [&](auto, auto tt) {
    using T = typename decltype(tt)::type;
    compute_h_fwd_kernel<T><<<cuda_rt::grid_for(d.T, 128), 128, 0, s>>>(
        proj.data<T>(), sumsq.data<T>(), alpha.data<T>(), bias.data<T>(), d, h_pre.data<T>(), h_post.data<T>(),
        h_res_logits.data<T>(), rinv.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void mhc_compute_h_backward(const Tensor& proj, const Tensor& sumsq, const Tensor& alpha, const Tensor& bias,
                            int64_t K, const MhcMappingOptions& o, const Tensor& g_pre, const Tensor& g_post,
                            const Tensor& g_res_logits, const Tensor& g_proj, const Tensor& g_sumsq,
                            const Tensor& g_alpha, const Tensor& g_bias) {
  const MapDims d{proj.size(0), K, o.n, o.n * o.n + 2 * o.n, o.norm_eps_inside_sqrt, o.norm_eps};
  if (d.T == 0) return;
  const DType ad = proj.dtype();
  cudaStream_t s = cuda_rt::current_stream(proj.device().index);
  Tensor dh = Tensor::empty({d.T, d.m}, ad, proj.device()), dha = Tensor::empty({d.T, d.m}, ad, proj.device());
  Tensor ga = as_acc(g_alpha, ad), gb = as_acc(g_bias, ad);
  by_act(ad, [&](auto, auto tt) {
    using T = typename decltype(tt)::type;
    compute_h_bwd_kernel<T><<<cuda_rt::grid_for(d.T, 128), 128, 0, s>>>(
        proj.data<T>(), sumsq.data<T>(), alpha.data<T>(), bias.data<T>(), d, g_pre.data<T>(), g_post.data<T>(),
        g_res_logits.data<T>(), dh.data<T>(), dha.data<T>(), g_proj.data<T>(), g_sumsq.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
    mappings_bwd_params_kernel<T><<<cuda_rt::grid_for(d.m, 64), 64, 0, s>>>(dh.data<T>(), dha.data<T>(), d,
                                                                          gb.data<T>(), ga.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
  store_back(g_alpha, ga), store_back(g_bias, gb);
}

void mhc_sinkhorn_forward(const Tensor& logits, int64_t iterations, double eps, const Tensor& out) {
  const int64_t T_ = logits.size(0), n = logits.size(1);
  if (T_ == 0) return;
  cudaStream_t s = cuda_rt::current_stream(logits.device().index);
  Tensor trace = Tensor::empty({T_, mhc_math::sinkhorn_trace_size(n, iterations)}, logits.dtype(), logits.device());
  if (logits.dtype() == DType::F64)
    sinkhorn_fwd_kernel<double><<<cuda_rt::grid_for(T_, 128), 128, 0, s>>>(
        logits.data<double>(), T_, n, iterations, eps, out.data<double>(), trace.data<double>());
  else
    sinkhorn_fwd_kernel<float><<<cuda_rt::grid_for(T_, 128), 128, 0, s>>>(
        logits.data<float>(), T_, n, iterations, static_cast<float>(eps), out.data<float>(), trace.data<float>());
  STRATA_CUDA_LAUNCH_CHECK();
}

void mhc_sinkhorn_backward(const Tensor& logits, int64_t iterations, double eps, const Tensor& g_out,
                           const Tensor& g_logits) {
  const int64_t T_ = logits.size(0), n = logits.size(1);
  if (T_ == 0) return;
  cudaStream_t s = cuda_rt::current_stream(logits.device().index);
  Tensor trace = Tensor::empty({T_, mhc_math::sinkhorn_trace_size(n, iterations)}, logits.dtype(), logits.device());
  if (logits.dtype() == DType::F64)
    sinkhorn_bwd_kernel<double><<<cuda_rt::grid_for(T_, 128), 128, 0, s>>>(
        logits.data<double>(), T_, n, iterations, eps, g_out.data<double>(), g_logits.data<double>(),
        trace.data<double>());
  else
    sinkhorn_bwd_kernel<float><<<cuda_rt::grid_for(T_, 128), 128, 0, s>>>(
        logits.data<float>(), T_, n, iterations, static_cast<float>(eps), g_out.data<float>(),
        g_logits.data<float>(), trace.data<float>());
  STRATA_CUDA_LAUNCH_CHECK();
}

}  // namespace strata::kernels::cuda
