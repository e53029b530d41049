// CUDA activations (kernels/activation.h); CPU reference in kernels/cpu/activation.cpp.
// Grid-stride elementwise kernels; math in float (double for f64) via kernels/activation_math.h.
#include "core/cuda/cuda_utils.h"
#include "kernels/activation.h"
#include "kernels/activation_math.h"

namespace strata::kernels::cuda {
namespace {
enum class Act { GeluTanh, GeluErf, Silu };

template <Act A, typename T> __device__ __forceinline__ T act_fwd(T v) {
  if constexpr (A == Act::GeluTanh) return act::gelu_tanh(v);
  else if constexpr (A == Act::GeluErf) return act::gelu_erf(v);
  else return act::silu(v);
}
template <Act A, typename T> __device__ __forceinline__ T act_grad(T v) {
  if constexpr (A == Act::GeluTanh) return act::gelu_tanh_grad(v);
  else if constexpr (A == Act::GeluErf) return act::gelu_erf_grad(v);
  else return act::silu_grad(v);
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <Act A, typename T>
__global__ void unary_fwd_kernel(const T* x, T* y, int64_t n) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) y[i] = convert<T>(act_fwd<A>(convert<acc>(x[i])));
}
template <Act A, typename T>
__global__ void unary_bwd_kernel(const T* x, const T* dy, T* dx, int64_t n) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) dx[i] = convert<T>(convert<acc>(dy[i]) * act_grad<A>(convert<acc>(x[i])));
}
template <typename T>
__global__ void swiglu_fwd_kernel(const T* x, T* y, int64_t rows, int64_t f) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, rows * f) {
    int64_t r = i / f, j = i % f;
    acc a = convert<acc>(x[r * 2 * f + j]), b = convert<acc>(x[r * 2 * f + f + j]);
    y[i] = convert<T>(act::silu(a) * b);
  }
}
template <typename T>
__global__ void swiglu_bwd_kernel(const T* x, const T* dy, T* dx, int64_t rows, int64_t f) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, rows * f) {
    int64_t r = i / f, j = i % f;
    acc a = convert<acc>(x[r * 2 * f + j]), b = convert<acc>(x[r * 2 * f + f + j]);
    acc g = convert<acc>(dy[i]);
    dx[r * 2 * f + j] = convert<T>(g * b * act::silu_grad(a));
    dx[r * 2 * f + f + j] = convert<T>(g * act::silu(a));
  }
}

template <Act A>
void launch_fwd(const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "activation", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    unary_fwd_kernel<A, scalar_t><<<cuda_rt::grid_for(n, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<scalar_t*>(y.data_ptr()), n);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}
template <Act A>
void launch_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "activation backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    unary_bwd_kernel<A, scalar_t><<<cuda_rt::grid_for(n, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<const scalar_t*>(dy.data_ptr()),
        static_cast<scalar_t*>(dx.data_ptr()), n);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}
}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y, GeluApprox approx) {
  if (approx == GeluApprox::Tanh) launch_fwd<Act::GeluTanh>(x, y);
  else launch_fwd<Act::GeluErf>(x, y);
}
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, GeluApprox approx) {
  if (approx == GeluApprox::Tanh) launch_bwd<Act::GeluTanh>(x, dy, dx);
  else launch_bwd<Act::GeluErf>(x, dy, dx);
}
void silu_forward(const Tensor& x, const Tensor& y) { launch_fwd<Act::Silu>(x, y); }
void silu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) { launch_bwd<Act::Silu>(x, dy, dx); }

void swiglu_forward(const Tensor& x, const Tensor& y) {
  const int64_t f = y.size(-1), rows = y.numel() / f;
  if (rows * f == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "swiglu_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    swiglu_fwd_kernel<scalar_t><<<cuda_rt::grid_for(rows * f, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<scalar_t*>(y.data_ptr()), rows, f);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}
void swiglu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t f = dy.size(-1), rows = dy.numel() / f;
  if (rows * f == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "swiglu_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    swiglu_bwd_kernel<scalar_t><<<cuda_rt::grid_for(rows * f, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<const scalar_t*>(dy.data_ptr()),
        static_cast<scalar_t*>(dx.data_ptr()), rows, f);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::kernels::cuda
