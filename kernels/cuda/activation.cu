// CUDA activations (kernels/activation.h); CPU reference in kernels/cpu/activation.cpp.
// Grid-stride elementwise kernels; math in float (double for f64) via kernels/activation_math.h.
// The weighted squared ReLU's backward: one block per row, its weight gradient reduced in a fixed
// tree (kernels/cuda/row_reduce.cuh).
#include <type_traits>

#include "core/cuda/cuda_utils.h"
#include "kernels/activation.h"
#include "kernels/activation_math.h"
#include "kernels/cuda/row_reduce.cuh"

namespace strata::kernels::cuda {
namespace {
enum class Act { GeluTanh, GeluErf, Silu, SquaredRelu };

template <Act A, typename T> __device__ __forceinline__ T act_fwd(T v) {
  if constexpr (A == Act::GeluTanh) return act::gelu_tanh(v);
  else if constexpr (A == Act::GeluErf) return act::gelu_erf(v);
  else if constexpr (A == Act::Silu) return act::silu(v);
  else return act::squared_relu(v);
}
template <Act A, typename T> __device__ __forceinline__ T act_grad(T v) {
  if constexpr (A == Act::GeluTanh) return act::gelu_tanh_grad(v);
  else if constexpr (A == Act::GeluErf) return act::gelu_erf_grad(v);
  else if constexpr (A == Act::Silu) return act::silu_grad(v);
  else return act::squared_relu_grad(v);
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
__global__ void glu_fwd_kernel(const T* x, T* y, int64_t rows, int64_t f, act::Glu<acc_t<T>> glu) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, rows * f) {
    int64_t r = i / f, j = i % f;
    acc a = convert<acc>(x[r * 2 * f + j]), b = convert<acc>(x[r * 2 * f + f + j]);
    y[i] = convert<T>(glu.forward(a, b));
  }
}
template <typename T>
__global__ void glu_bwd_kernel(const T* x, const T* dy, T* dx, int64_t rows, int64_t f, act::Glu<acc_t<T>> glu) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, rows * f) {
    int64_t r = i / f, j = i % f;
    acc a = convert<acc>(x[r * 2 * f + j]), b = convert<acc>(x[r * 2 * f + f + j]), da, db;
    glu.backward(a, b, convert<acc>(dy[i]), da, db);
    dx[r * 2 * f + j] = convert<T>(da);
    dx[r * 2 * f + f + j] = convert<T>(db);
  }
}

// Math in double when the rows or their weights are f64, else float.
template <typename T, typename P>
using weighted_acc_t = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<P, double>, double, float>;

template <typename T, typename P>
__global__ void weighted_srelu_fwd_kernel(const T* x, const P* w, T* y, int64_t n, int64_t f) {
  using acc = weighted_acc_t<T, P>;
  GRID_STRIDE(i, n * f) y[i] = convert<T>(act::squared_relu(convert<acc>(x[i])) * static_cast<acc>(w[i / f]));
}
// One block (kRowBlock threads) per row: dx elementwise, dw the row's sum in a fixed tree.
constexpr int kRowBlock = 256;
template <typename T, typename P>
__global__ void weighted_srelu_bwd_kernel(const T* x, const P* w, const T* dy, T* dx, P* dw, int64_t n, int64_t f) {
  using acc = weighted_acc_t<T, P>;
  __shared__ rowred::Scratch<kRowBlock, acc> scratch;
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const acc wr = static_cast<acc>(w[r]);
    acc dot = acc(0);
    for (int64_t j = threadIdx.x; j < f; j += blockDim.x) {  // dy read before dx is written (may alias)
      const acc v = convert<acc>(x[r * f + j]), g = convert<acc>(dy[r * f + j]);
      dot += act::squared_relu(v) * g;
      dx[r * f + j] = convert<T>(g * wr * act::squared_relu_grad(v));
    }
    dot = rowred::row_sum<kRowBlock, acc>(dot, scratch);
    if (threadIdx.x == 0) dw[r] = static_cast<P>(dot);
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

void glu_forward(const Tensor& x, const Tensor& y, const GluOptions& options) {
  const int64_t f = y.size(-1), rows = y.numel() / f;
  if (rows * f == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "glu_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    glu_fwd_kernel<scalar_t><<<cuda_rt::grid_for(rows * f, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<scalar_t*>(y.data_ptr()), rows, f,
        act::make_glu<acc_t<scalar_t>>(options));
    STRATA_CUDA_LAUNCH_CHECK();
  });
}
void glu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const GluOptions& options) {
  const int64_t f = dy.size(-1), rows = dy.numel() / f;
  if (rows * f == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "glu_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    glu_bwd_kernel<scalar_t><<<cuda_rt::grid_for(rows * f, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<const scalar_t*>(dy.data_ptr()),
        static_cast<scalar_t*>(dx.data_ptr()), rows, f, act::make_glu<acc_t<scalar_t>>(options));
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void squared_relu_forward(const Tensor& x, const Tensor& y) { launch_fwd<Act::SquaredRelu>(x, y); }
void squared_relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  launch_bwd<Act::SquaredRelu>(x, dy, dx);
}

namespace {
// Calls f(TypeTag<scalar_t>{}, TypeTag<P>{}) for x's dtype and the f32/f64 row weights.
template <typename F>
void dispatch_weighted(const Tensor& x, const Tensor& weights, const char* op, F&& f) {
  dispatch_float(x.dtype(), op, [&](auto tag_) {
    if (weights.dtype() == DType::F64) f(tag_, TypeTag<double>{});
    else f(tag_, TypeTag<float>{});
  });
}
unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows > 0x7fffffff ? 0x7fffffff : rows); }
}  // namespace

void weighted_squared_relu_forward(const Tensor& x, const Tensor& weights, const Tensor& y) {
  const int64_t n = x.size(0), f = x.size(1);
  if (n * f == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_weighted(x, weights, "weighted_squared_relu_forward", [&](auto tag_, auto ptag) {
    STRATA_SCALAR(tag_);
    using P = typename decltype(ptag)::type;
    weighted_srelu_fwd_kernel<scalar_t, P><<<cuda_rt::grid_for(n * f, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<const P*>(weights.data_ptr()),
        static_cast<scalar_t*>(y.data_ptr()), n, f);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}
void weighted_squared_relu_backward(const Tensor& x, const Tensor& weights, const Tensor& dy, const Tensor& dx,
                                    const Tensor& dweights) {
  const int64_t n = x.size(0), f = x.size(1);
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_weighted(x, weights, "weighted_squared_relu_backward", [&](auto tag_, auto ptag) {
    STRATA_SCALAR(tag_);
    using P = typename decltype(ptag)::type;
    weighted_srelu_bwd_kernel<scalar_t, P><<<row_grid(n), kRowBlock, 0, s>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<const P*>(weights.data_ptr()),
        static_cast<const scalar_t*>(dy.data_ptr()), static_cast<scalar_t*>(dx.data_ptr()),
        static_cast<P*>(dweights.data_ptr()), n, f);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::kernels::cuda
