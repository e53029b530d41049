// CUDA causal depthwise conv1d + SiLU (kernels/causal_conv1d.h); CPU reference in
// kernels/cpu/causal_conv1d.cpp. Inputs converted to the accumulation type (f64 for f64 x, else
// f32). Forward and dx: one thread per output element (dx gathers the K outputs it feeds, no
// atomics); dw/dbias: one thread per weight summing over (batch, time) in index order.
#include "core/cuda/cuda_utils.h"
#include "kernels/causal_conv1d.h"

namespace strata::kernels::cuda {
namespace {
struct ConvDims {
  int64_t b, l, C, K;
};

template <typename T>
__device__ T input_at(const T* x, const T* hist, const ConvDims& d, int64_t bi, int64_t t, int64_t c) {
  if (t >= 0) return x[(bi * d.l + t) * d.C + c];
  return hist ? hist[(bi * d.C + c) * (d.K - 1) + (d.K - 1 + t)] : T(0);
}
template <typename T>
__device__ T pre_act(const T* x, const T* hist, const T* w, const T* bias, const ConvDims& d, int64_t bi, int64_t t,
                     int64_t c) {
  T u = bias[c];
  for (int64_t k = 0; k < d.K; ++k) u += w[c * d.K + k] * input_at(x, hist, d, bi, t - (d.K - 1) + k, c);
  return u;
}
template <typename T>
__device__ T silu_grad_times(T u, T g) {
  const T s = T(1) / (T(1) + exp(-u));
  return g * s * (T(1) + u * (T(1) - s));
}

template <typename T>
__global__ void conv_fwd_kernel(const T* x, const T* hist, const T* w, const T* bias, ConvDims d, T* y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d.b * d.l * d.C) return;
  const int64_t c = i % d.C, t = (i / d.C) % d.l, bi = i / (d.C * d.l);
  const T u = pre_act(x, hist, w, bias, d, bi, t, c);
  y[i] = u / (T(1) + exp(-u));
}
template <typename T>
__global__ void conv_history_kernel(const T* x, const T* hist, ConvDims d, T* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d.b * d.C * (d.K - 1)) return;
  const int64_t j = i % (d.K - 1), c = (i / (d.K - 1)) % d.C, bi = i / ((d.K - 1) * d.C);
  out[i] = input_at(x, hist, d, bi, d.l - (d.K - 1) + j, c);
}
template <typename T>
__global__ void conv_dx_kernel(const T* x, const T* w, const T* bias, const T* dy, ConvDims d, T* dx) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d.b * d.l * d.C) return;
  const int64_t c = i % d.C, s = (i / d.C) % d.l, bi = i / (d.C * d.l);
  T acc = 0;
  for (int64_t k = 0; k < d.K; ++k) {
    const int64_t t = s + (d.K - 1) - k;  // the output that reads x[s] through tap k
    if (t >= d.l) continue;
    const T u = pre_act<T>(x, nullptr, w, bias, d, bi, t, c);
    acc += w[c * d.K + k] * silu_grad_times(u, dy[(bi * d.l + t) * d.C + c]);
  }
  dx[i] = acc;
}
template <typename T>
__global__ void conv_dw_kernel(const T* x, const T* w, const T* bias, const T* dy, ConvDims d, T* dw, T* db) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d.C * (d.K + 1)) return;
  const int64_t c = i / (d.K + 1), k = i % (d.K + 1);  // k == K: the bias
  T acc = 0;
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t t = 0; t < d.l; ++t) {
      const T g = silu_grad_times(pre_act<T>(x, nullptr, w, bias, d, bi, t, c), dy[(bi * d.l + t) * d.C + c]);
      if (k == d.K) acc += g;
      else acc += g * input_at<T>(x, nullptr, d, bi, t - (d.K - 1) + k, c);
    }
  if (k == d.K) db[c] += acc;
  else dw[c * d.K + k] += acc;
}

DType acc_dtype(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }
Tensor acc(const Tensor& t, DType dt) { return t.defined() ? t.contiguous().to(dt) : Tensor(); }
template <typename T>
const T* opt(const Tensor& t) { return t.defined() ? t.template data<T>() : nullptr; }
void store(const Tensor& out, const Tensor& v) {
  Tensor o = out;  // a handle on the same storage
  if (o.defined() && o.data_ptr() != v.data_ptr()) o.copy_(v);
}
ConvDims dims(const Tensor& x, const Tensor& w) { return {x.size(0), x.size(1), x.size(2), w.size(1)}; }

template <typename T>
void forward_typed(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& history, const Tensor& y,
                   const Tensor& final_history, DType ad) {
  const ConvDims d = dims(x, w);
  const Tensor xa = acc(x, ad), wa = acc(w, ad), ba = acc(bias, ad), ha = acc(history, ad);
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  const int64_t n = d.b * d.l * d.C;
  if (n > 0) {
    Tensor ya = Tensor::empty(x.shape(), ad, x.device());
    conv_fwd_kernel<T><<<cuda_rt::grid_for(n, 256), 256, 0, s>>>(xa.template data<T>(), opt<T>(ha), wa.template data<T>(),
                                                                  ba.template data<T>(), d, ya.template data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
    store(y, ya);
  }
  const int64_t nh = d.b * d.C * (d.K - 1);
  if (final_history.defined() && nh > 0) {
    Tensor fa = Tensor::empty(final_history.shape(), ad, x.device());
    conv_history_kernel<T><<<cuda_rt::grid_for(nh, 256), 256, 0, s>>>(xa.template data<T>(), opt<T>(ha), d,
                                                                       fa.template data<T>());
    STRATA_CUDA_LAUNCH_CHECK();
    store(final_history, fa);
  }
}

template <typename T>
void backward_typed(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy, const Tensor& dx,
                    const Tensor& dw, const Tensor& dbias, DType ad) {
  const ConvDims d = dims(x, w);
  const Tensor xa = acc(x, ad), wa = acc(w, ad), ba = acc(bias, ad), dya = acc(dy, ad);
  Tensor dwa = acc(dw, ad), dba = acc(dbias, ad);  // dw itself when already the accumulation type
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  const int64_t n = d.b * d.l * d.C;
  if (n == 0) return;
  Tensor dxa = Tensor::empty(x.shape(), ad, x.device());
  conv_dx_kernel<T><<<cuda_rt::grid_for(n, 256), 256, 0, s>>>(xa.template data<T>(), wa.template data<T>(), ba.template data<T>(),
                                                               dya.template data<T>(), d, dxa.template data<T>());
  conv_dw_kernel<T><<<cuda_rt::grid_for(d.C * (d.K + 1), 128), 128, 0, s>>>(
      xa.template data<T>(), wa.template data<T>(), ba.template data<T>(), dya.template data<T>(), d, dwa.template data<T>(), dba.template data<T>());
  STRATA_CUDA_LAUNCH_CHECK();
  store(dx, dxa);
  store(dw, dwa);
  store(dbias, dba);
}
}  // namespace

void causal_conv1d_silu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& history,
                                const Tensor& y, const Tensor& final_history) {
  if (acc_dtype(x) == DType::F64) forward_typed<double>(x, w, bias, history, y, final_history, DType::F64);
  else forward_typed<float>(x, w, bias, history, y, final_history, DType::F32);
}
void causal_conv1d_silu_backward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy,
                                 const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (acc_dtype(x) == DType::F64) backward_typed<double>(x, w, bias, dy, dx, dw, dbias, DType::F64);
  else backward_typed<float>(x, w, bias, dy, dx, dw, dbias, DType::F32);
}

}  // namespace strata::kernels::cuda
