// CUDA row softmax (kernels/softmax.h); CPU reference in kernels/cpu/softmax.cpp.
// Reference: llm.c dev/cuda/softmax_forward.cu (warp/block per row), Megatron-Core
// scaled_upper_triang_masked_softmax. One row per warp (c <= 1024) or per block
// (kernels/cuda/row_reduce.cuh): max pass, Σexp pass, write pass; math in acc_t<T>.
// Causal rows only read their valid prefix j <= i and write 0 beyond it.
#include "core/cuda/cuda_utils.h"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/softmax.h"

namespace strata::kernels::cuda {
namespace {
using rowred::Scratch;

template <int W, typename T>
__global__ void __launch_bounds__(rowred::block_threads<W>())
    softmax_fwd_kernel(const T* x, T* y, int64_t n, int64_t c, acc_t<T> scale, bool causal) {
  using A = acc_t<T>;
  __shared__ Scratch<W, A> scratch;
  constexpr int kRows = rowred::rows_per_block<W>();
  const int t = threadIdx.x % W;
  for (int64_t r = int64_t(blockIdx.x) * kRows + threadIdx.x / W; r < n; r += int64_t(gridDim.x) * kRows) {
    const T* xr = x + r * c;
    T* yr = y + r * c;
    const int64_t valid = causal ? r % c + 1 : c;
    A m = -INFINITY;
    for (int64_t j = t; j < valid; j += W) m = fmax(m, scale * convert<A>(xr[j]));
    m = rowred::row_max<W>(m, scratch);
    A s = 0;
    for (int64_t j = t; j < valid; j += W) s += exp(scale * convert<A>(xr[j]) - m);
    const A inv = A(1) / rowred::row_sum<W>(s, scratch);
    // x is fully read by every thread of the row before any y is written (y may alias x).
    for (int64_t j = t; j < c; j += W) yr[j] = convert<T>(j < valid ? exp(scale * convert<A>(xr[j]) - m) * inv : A(0));
  }
}

template <int W, typename T>
__global__ void __launch_bounds__(rowred::block_threads<W>())
    softmax_bwd_kernel(const T* y, const T* dy, T* dx, int64_t n, int64_t c, acc_t<T> scale, bool causal) {
  using A = acc_t<T>;
  __shared__ Scratch<W, A> scratch;
  constexpr int kRows = rowred::rows_per_block<W>();
  const int t = threadIdx.x % W;
  for (int64_t r = int64_t(blockIdx.x) * kRows + threadIdx.x / W; r < n; r += int64_t(gridDim.x) * kRows) {
    const T* yr = y + r * c;
    const T* dyr = dy + r * c;
    T* dxr = dx + r * c;
    const int64_t valid = causal ? r % c + 1 : c;
    A s = 0;
    for (int64_t j = t; j < valid; j += W) s += convert<A>(yr[j]) * convert<A>(dyr[j]);
    s = rowred::row_sum<W>(s, scratch);
    // Each element of dx is written by the thread that read dy there (dx may alias dy).
    for (int64_t j = t; j < c; j += W)
      dxr[j] = convert<T>(j < valid ? scale * convert<A>(yr[j]) * (convert<A>(dyr[j]) - s) : A(0));
  }
}
}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxOptions& opt) {
  const int64_t c = x.size(-1), n = x.numel() / c;
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), "softmax_forward", [&](auto tag) {
    STRATA_SCALAR(tag);
    using A = acc_t<scalar_t>;
    rowred::with_row_width(c, [&](auto w) {
      constexpr int W = decltype(w)::value;
      softmax_fwd_kernel<W, scalar_t><<<rowred::row_grid<W>(n), rowred::block_threads<W>(), 0, s>>>(
          static_cast<const scalar_t*>(x.data_ptr()), static_cast<scalar_t*>(y.data_ptr()), n, c,
          static_cast<A>(opt.scale), opt.causal);
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, const SoftmaxOptions& opt) {
  const int64_t c = y.size(-1), n = y.numel() / c;
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(y.device().index);
  dispatch_float(y.dtype(), "softmax_backward", [&](auto tag) {
    STRATA_SCALAR(tag);
    using A = acc_t<scalar_t>;
    rowred::with_row_width(c, [&](auto w) {
      constexpr int W = decltype(w)::value;
      softmax_bwd_kernel<W, scalar_t><<<rowred::row_grid<W>(n), rowred::block_threads<W>(), 0, s>>>(
          static_cast<const scalar_t*>(y.data_ptr()), static_cast<const scalar_t*>(dy.data_ptr()),
          static_cast<scalar_t*>(dx.data_ptr()), n, c, static_cast<A>(opt.scale), opt.causal);
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace strata::kernels::cuda
