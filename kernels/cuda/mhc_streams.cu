// CUDA mHC stream ops (kernels/mhc.h): aggregation, merge, learned contraction, stream sum and
// broadcast; CPU reference in kernels/cpu/mhc_streams.cpp. Straightforward and deterministic: one
// thread per output element, reductions over C or over tokens in index order by one thread per
// output, the contraction's per-token quantities by one block per token. Math in f32 (f64 for f64
// activations); with keep_fp32 = false the mappings and their gradients are rounded to the
// activation dtype where they meet the streams (applied<A>).
#include "core/cuda/cuda_utils.h"
#include "core/half.h"
#include "kernels/cuda/mhc_dispatch.cuh"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/mhc.h"
#include "kernels/mhc_math.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kThreads = 256;

struct Dims {
  int64_t T, n, C;
  bool keep;
};
// v rounded to the activation dtype A unless the mappings stay in f32.
template <typename A, typename T>
__device__ T applied(T v, bool keep) {
  if constexpr (std::is_same_v<A, T>) return v;
  else return keep ? v : convert<T>(convert<A>(v));
}

template <typename A, typename T>
__global__ void aggregate_fwd_kernel(const A* x, const T* h, Dims d, A* out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * d.C) return;
  const int64_t t = e / d.C, c = e % d.C;
  T acc = 0;
  for (int64_t i = 0; i < d.n; ++i) acc += applied<A>(h[t * d.n + i], d.keep) * convert<T>(x[(t * d.n + i) * d.C + c]);
  out[e] = convert<A>(acc);
}
template <typename A, typename T>
__global__ void aggregate_bwd_x_kernel(const T* h, const A* g, Dims d, T* gx) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * d.n * d.C) return;
  const int64_t c = e % d.C, ti = e / d.C, t = ti / d.n;
  gx[e] += convert<T>(g[t * d.C + c]) * applied<A>(h[ti], d.keep);
}
template <typename A, typename T>
__global__ void aggregate_bwd_h_kernel(const A* x, const A* g, Dims d, T* gh) {
  const int64_t ti = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ti >= d.T * d.n) return;
  const int64_t t = ti / d.n;
  T acc = 0;
  for (int64_t c = 0; c < d.C; ++c) acc += convert<T>(g[t * d.C + c]) * convert<T>(x[ti * d.C + c]);
  gh[ti] = applied<A>(acc, d.keep);
}

template <typename A, typename T>
__device__ T post_input(const A* y, const A* b, int64_t t, int64_t c, int64_t C) {
  return convert<T>(y[t * C + c]) + (b ? convert<T>(b[c]) : T(0));
}
template <typename A, typename T>
__global__ void merge_fwd_kernel(const A* x, const T* hr, const T* hp, const A* y, const A* b, const T* ps, Dims d,
                                 A* out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * d.n * d.C) return;
  const int64_t c = e % d.C, tj = e / d.C, t = tj / d.n, j = tj % d.n;
  T mixed = 0;
  for (int64_t i = 0; i < d.n; ++i)
    mixed += applied<A>(hr[(t * d.n + i) * d.n + j], d.keep) * convert<T>(x[(t * d.n + i) * d.C + c]);
  const T post = applied<A>(hp[tj], d.keep);
  T expanded = post * convert<T>(y[t * d.C + c]) + (b ? post * convert<T>(b[c]) : T(0));
  if (ps) expanded *= ps[e];
  out[e] = convert<A>(mixed + expanded);
}
template <typename A, typename T>
__device__ T post_grad(const A* g, const T* ps, int64_t e) {
  return ps ? ps[e] * convert<T>(g[e]) : convert<T>(g[e]);
}
template <typename A, typename T>
__global__ void merge_bwd_x_kernel(const T* hr, const A* g, Dims d, T* gx) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * d.n * d.C) return;
  const int64_t c = e % d.C, ti = e / d.C, t = ti / d.n, i = ti % d.n;
  T acc = 0;
  for (int64_t j = 0; j < d.n; ++j)
    acc += applied<A>(hr[(t * d.n + i) * d.n + j], d.keep) * convert<T>(g[(t * d.n + j) * d.C + c]);
  gx[e] += acc;
}
template <typename A, typename T>
__global__ void merge_bwd_h_kernel(const A* x, const A* y, const A* b, const T* ps, const A* g, Dims d, T* ghr,
                                   T* ghp) {
  const int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // (t, i, j) for h_res, then (t, j)
  const int64_t nres = d.T * d.n * d.n;
  if (q < nres) {
    const int64_t j = q % d.n, i = (q / d.n) % d.n, t = q / (d.n * d.n);
    T acc = 0;
    for (int64_t c = 0; c < d.C; ++c)
      acc += convert<T>(x[(t * d.n + i) * d.C + c]) * convert<T>(g[(t * d.n + j) * d.C + c]);
    ghr[q] = applied<A>(acc, d.keep);
  } else if (q < nres + d.T * d.n) {
    const int64_t tj = q - nres, t = tj / d.n;
    T acc = 0;
    for (int64_t c = 0; c < d.C; ++c) acc += post_grad<A, T>(g, ps, tj * d.C + c) * post_input<A, T>(y, b, t, c, d.C);
    ghp[tj] = applied<A>(acc, d.keep);
  }
}
template <typename A, typename T>
__global__ void merge_bwd_y_kernel(const T* hp, const T* ps, const A* g, Dims d, T* gy) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * d.C) return;
  const int64_t t = e / d.C, c = e % d.C;
  T acc = 0;
  for (int64_t j = 0; j < d.n; ++j)
    acc += applied<A>(hp[t * d.n + j], d.keep) * post_grad<A, T>(g, ps, (t * d.n + j) * d.C + c);
  gy[e] = acc;
}
template <typename T>
__global__ void column_sum_kernel(const T* gy, int64_t rows, int64_t C, T* gb) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  T acc = 0;
  for (int64_t t = 0; t < rows; ++t) acc += gy[t * C + c];
  gb[c] += acc;
}

// The contraction's per-token quantities: rs [T], dot [T, n], sig [T, n] (one block per token).
template <typename A, typename T>
__global__ void contract_token_kernel(const A* x, const T* fn, const T* base, const T* scale, Dims d, double eps,
                                      T* rs, T* dot, T* sig) {
  __shared__ rowred::Scratch<kThreads, T> s;
  const int64_t t = blockIdx.x, K = d.n * d.C;
  const A* xr = x + t * K;
  T ss = 0;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) ss += convert<T>(xr[k]) * convert<T>(xr[k]);
  ss = rowred::row_sum<kThreads, T>(ss, s);
  const T r = T(1) / sqrt(ss / T(K) + T(eps));
  if (threadIdx.x == 0) rs[t] = r;
  for (int64_t j = 0; j < d.n; ++j) {
    T p = 0;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) p += convert<T>(xr[k]) * fn[j * K + k];
    p = rowred::row_sum<kThreads, T>(p, s);
    if (threadIdx.x == 0) dot[t * d.n + j] = p, sig[t * d.n + j] = mhc_math::sigmoid(p * r * scale[0] + base[j]);
  }
}
template <typename A, typename T>
__global__ void contract_fwd_kernel(const A* x, const T* sig, Dims d, double eps, A* out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * d.C) return;
  const int64_t t = e / d.C, c = e % d.C;
  T acc = 0;
  for (int64_t j = 0; j < d.n; ++j) acc += (sig[t * d.n + j] + T(eps)) * convert<T>(x[(t * d.n + j) * d.C + c]);
  out[e] = convert<A>(acc);
}
// Per token (t, j): dz = g_pre·σ(1−σ), dmix = dz·scale; drs per token from thread 0 of the block.
template <typename A, typename T>
__global__ void contract_bwd_token_kernel(const A* x, const A* g, const T* scale, const T* rs, const T* dot,
                                          const T* sig, Dims d, T* dz, T* dmix, T* drs) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= d.T) return;
  const int64_t K = d.n * d.C;
  T acc_drs = 0;
  for (int64_t j = 0; j < d.n; ++j) {
    T gpre = 0;
    for (int64_t c = 0; c < d.C; ++c) gpre += convert<T>(g[t * d.C + c]) * convert<T>(x[t * K + j * d.C + c]);
    const T sg = sig[t * d.n + j], z = gpre * sg * (T(1) - sg);
    dz[t * d.n + j] = z;
    dmix[t * d.n + j] = z * scale[0];
    acc_drs += z * scale[0] * dot[t * d.n + j];
  }
  drs[t] = acc_drs;
}
template <typename A, typename T>
__global__ void contract_bwd_x_kernel(const A* x, const A* g, const T* fn, const T* rs, const T* sig, const T* dmix,
                                      const T* drs, Dims d, double eps, T* gx) {
  const int64_t K = d.n * d.C, e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * K) return;
  const int64_t t = e / K, k = e % K, j0 = k / d.C, c = k % d.C;
  const T r = rs[t];
  T acc = (sig[t * d.n + j0] + T(eps)) * convert<T>(g[t * d.C + c]) - drs[t] * r * r * r / T(K) * convert<T>(x[e]);
  for (int64_t j = 0; j < d.n; ++j) acc += dmix[t * d.n + j] * r * fn[j * K + k];
  gx[e] += acc;
}
template <typename A, typename T>
__global__ void contract_bwd_params_kernel(const A* x, const T* rs, const T* dot, const T* dz, const T* dmix, Dims d,
                                           T* gfn, T* gbase, T* gscale) {
  const int64_t K = d.n * d.C, q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (q < d.n * K) {
    const int64_t j = q / K, k = q % K;
    T acc = 0;
    for (int64_t t = 0; t < d.T; ++t) acc += dmix[t * d.n + j] * rs[t] * convert<T>(x[t * K + k]);
    gfn[q] += acc;
  } else if (q < d.n * K + d.n) {
    const int64_t j = q - d.n * K;
    T acc = 0;
    for (int64_t t = 0; t < d.T; ++t) acc += dz[t * d.n + j];
    gbase[j] += acc;
  } else if (q == d.n * K + d.n) {
    T acc = 0;
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t j = 0; j < d.n; ++j) acc += dz[t * d.n + j] * dot[t * d.n + j] * rs[t];
    gscale[0] += acc;
  }
}

template <typename A, typename T>
__global__ void stream_sum_kernel(const A* x, Dims d, T scale, A* out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * d.C) return;
  const int64_t t = e / d.C, c = e % d.C;
  T acc = 0;
  for (int64_t j = 0; j < d.n; ++j) acc += convert<T>(x[(t * d.n + j) * d.C + c]);
  out[e] = convert<A>(scale * acc);
}
template <typename A, typename T>
__global__ void stream_broadcast_kernel(const A* x, Dims d, T scale, A* out) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d.T * d.n * d.C) return;
  const int64_t c = e % d.C, t = e / (d.n * d.C);
  out[e] = convert<A>(scale * convert<T>(x[t * d.C + c]));
}

using mhc_dispatch::acc_of;
using mhc_dispatch::as_acc;
using mhc_dispatch::by_act;
using mhc_dispatch::opt;
using mhc_dispatch::store_back;
using mhc_dispatch::stream_of;
#define STRATA_MHC_TYPES            \
  using A = typename decltype(at)::type; \
  using T = typename decltype(tt)::type
}  // namespace

void mhc_aggregate_forward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& out) {
  const Dims d{x.size(0), h_pre.size(1), x.size(1) / h_pre.size(1), keep_fp32};
  if (d.T * d.C == 0) return;
  by_act(x.dtype(), [&](auto at, auto tt) {
    STRATA_MHC_TYPES;
    aggregate_fwd_kernel<A, T><<<cuda_rt::grid_for(d.T * d.C, kThreads), kThreads, 0, stream_of(x)>>>(
        x.data<A>(), h_pre.data<T>(), d, out.data<A>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void mhc_aggregate_backward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& g_out,
                            const Tensor& g_x, const Tensor& g_h_pre) {
  const Dims d{x.size(0), h_pre.size(1), x.size(1) / h_pre.size(1), keep_fp32};
  if (d.T * d.C == 0) return;
  Tensor gx = as_acc(g_x, acc_of(x));
  by_act(x.dtype(), [&](auto at, auto tt) {
    STRATA_MHC_TYPES;
    aggregate_bwd_x_kernel<A, T><<<cuda_rt::grid_for(d.T * d.n * d.C, kThreads), kThreads, 0, stream_of(x)>>>(
        h_pre.data<T>(), g_out.data<A>(), d, gx.data<T>());
    aggregate_bwd_h_kernel<A, T><<<cuda_rt::grid_for(d.T * d.n, 128), 128, 0, stream_of(x)>>>(
        x.data<A>(), g_out.data<A>(), d, g_h_pre.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
  store_back(g_x, gx);
}

void mhc_merge_forward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                       const Tensor& bias, const Tensor& post_scale, bool keep_fp32, const Tensor& out) {
  const Dims d{x.size(0), h_post.size(1), x.size(1) / h_post.size(1), keep_fp32};
  if (d.T * d.C == 0) return;
  by_act(x.dtype(), [&](auto at, auto tt) {
    STRATA_MHC_TYPES;
    merge_fwd_kernel<A, T><<<cuda_rt::grid_for(d.T * d.n * d.C, kThreads), kThreads, 0, stream_of(x)>>>(
        x.data<A>(), h_res.data<T>(), h_post.data<T>(), y.data<A>(), opt<A>(bias), opt<T>(post_scale), d,
        out.data<A>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void mhc_merge_backward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                        const Tensor& bias, const Tensor& post_scale, bool keep_fp32, const Tensor& g_out,
                        const Tensor& g_x, const Tensor& g_h_res, const Tensor& g_h_post, const Tensor& g_y,
                        const Tensor& g_bias) {
  const Dims d{x.size(0), h_post.size(1), x.size(1) / h_post.size(1), keep_fp32};
  if (d.T * d.C == 0) return;
  const DType ad = acc_of(x);
  Tensor gx = as_acc(g_x, ad), gy = Tensor::empty({d.T, d.C}, ad, x.device());
  Tensor gb = g_bias.defined() ? as_acc(g_bias, ad) : Tensor();
  by_act(x.dtype(), [&](auto at, auto tt) {
    STRATA_MHC_TYPES;
    cudaStream_t s = stream_of(x);
    merge_bwd_x_kernel<A, T><<<cuda_rt::grid_for(d.T * d.n * d.C, kThreads), kThreads, 0, s>>>(
        h_res.data<T>(), g_out.data<A>(), d, gx.data<T>());
    merge_bwd_h_kernel<A, T><<<cuda_rt::grid_for(d.T * d.n * (d.n + 1), 128), 128, 0, s>>>(
        x.data<A>(), y.data<A>(), opt<A>(bias), opt<T>(post_scale), g_out.data<A>(), d, g_h_res.data<T>(),
        g_h_post.data<T>());
    merge_bwd_y_kernel<A, T><<<cuda_rt::grid_for(d.T * d.C, kThreads), kThreads, 0, s>>>(
        h_post.data<T>(), opt<T>(post_scale), g_out.data<A>(), d, gy.data<T>());
    if (gb.defined())
      column_sum_kernel<T><<<cuda_rt::grid_for(d.C, 128), 128, 0, s>>>(gy.data<T>(), d.T, d.C, gb.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
  store_back(g_x, gx), store_back(g_y, gy), store_back(g_bias, gb);
}

void mhc_contract_forward(const Tensor& x, const Tensor& head_fn, const Tensor& head_base, const Tensor& head_scale,
                          double eps, const Tensor& out) {
  const Dims d{x.size(0), head_fn.size(0), x.size(1) / head_fn.size(0), true};
  if (d.T * d.C == 0) return;
  const DType ad = acc_of(x);
  Tensor rs = Tensor::empty({d.T}, ad, x.device()), dot = Tensor::empty({d.T, d.n}, ad, x.device());
  Tensor sig = Tensor::empty({d.T, d.n}, ad, x.device());
  by_act(x.dtype(), [&](auto at, auto tt) {
    STRATA_MHC_TYPES;
    contract_token_kernel<A, T><<<static_cast<unsigned>(d.T), kThreads, 0, stream_of(x)>>>(
        x.data<A>(), head_fn.data<T>(), head_base.data<T>(), head_scale.data<T>(), d, eps, rs.data<T>(),
        dot.data<T>(), sig.data<T>());
    contract_fwd_kernel<A, T><<<cuda_rt::grid_for(d.T * d.C, kThreads), kThreads, 0, stream_of(x)>>>(
        x.data<A>(), sig.data<T>(), d, eps, out.data<A>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void mhc_contract_backward(const Tensor& x, const Tensor& head_fn, const Tensor& head_base, const Tensor& head_scale,
                           double eps, const Tensor& g_out, const Tensor& g_x, const Tensor& g_fn,
                           const Tensor& g_base, const Tensor& g_scale) {
  const Dims d{x.size(0), head_fn.size(0), x.size(1) / head_fn.size(0), true};
  if (d.T * d.C == 0) return;
  const DType ad = acc_of(x);
  const Device dev = x.device();
  Tensor rs = Tensor::empty({d.T}, ad, dev), dot = Tensor::empty({d.T, d.n}, ad, dev);
  Tensor sig = Tensor::empty({d.T, d.n}, ad, dev), dz = Tensor::empty({d.T, d.n}, ad, dev);
  Tensor dmix = Tensor::empty({d.T, d.n}, ad, dev), drs = Tensor::empty({d.T}, ad, dev);
  Tensor gx = as_acc(g_x, ad), gfn = as_acc(g_fn, ad), gbase = as_acc(g_base, ad), gscale = as_acc(g_scale, ad);
  by_act(x.dtype(), [&](auto at, auto tt) {
    STRATA_MHC_TYPES;
    cudaStream_t s = stream_of(x);
    const int64_t K = d.n * d.C;
    contract_token_kernel<A, T><<<static_cast<unsigned>(d.T), kThreads, 0, s>>>(
        x.data<A>(), head_fn.data<T>(), head_base.data<T>(), head_scale.data<T>(), d, eps, rs.data<T>(),
        dot.data<T>(), sig.data<T>());
    contract_bwd_token_kernel<A, T><<<cuda_rt::grid_for(d.T, 128), 128, 0, s>>>(
        x.data<A>(), g_out.data<A>(), head_scale.data<T>(), rs.data<T>(), dot.data<T>(), sig.data<T>(), d,
        dz.data<T>(), dmix.data<T>(), drs.data<T>());
    contract_bwd_x_kernel<A, T><<<cuda_rt::grid_for(d.T * K, kThreads), kThreads, 0, s>>>(
        x.data<A>(), g_out.data<A>(), head_fn.data<T>(), rs.data<T>(), sig.data<T>(), dmix.data<T>(), drs.data<T>(),
        d, eps, gx.data<T>());
    contract_bwd_params_kernel<A, T><<<cuda_rt::grid_for(d.n * K + d.n + 1, 128), 128, 0, s>>>(
        x.data<A>(), rs.data<T>(), dot.data<T>(), dz.data<T>(), dmix.data<T>(), d, gfn.data<T>(), gbase.data<T>(),
        gscale.data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
  store_back(g_x, gx), store_back(g_fn, gfn), store_back(g_base, gbase), store_back(g_scale, gscale);
}

void mhc_stream_sum(const Tensor& x, int64_t n, double scale, const Tensor& out) {
  const Dims d{x.size(0), n, x.size(1) / n, true};
  if (d.T * d.C == 0) return;
  by_act(x.dtype(), [&](auto at, auto tt) {
    STRATA_MHC_TYPES;
    stream_sum_kernel<A, T><<<cuda_rt::grid_for(d.T * d.C, kThreads), kThreads, 0, stream_of(x)>>>(
        x.data<A>(), d, static_cast<T>(scale), out.data<A>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void mhc_stream_broadcast(const Tensor& x, int64_t n, double scale, const Tensor& out) {
  const Dims d{x.size(0), n, x.size(1), true};
  if (d.T * d.C == 0) return;
  by_act(x.dtype(), [&](auto at, auto tt) {
    STRATA_MHC_TYPES;
    stream_broadcast_kernel<A, T><<<cuda_rt::grid_for(d.T * d.n * d.C, kThreads), kThreads, 0, stream_of(x)>>>(
        x.data<A>(), d, static_cast<T>(scale), out.data<A>());
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::kernels::cuda
