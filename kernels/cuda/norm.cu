// CUDA LayerNorm and RMSNorm (kernels/norm.h); CPU reference in kernels/cpu/norm.cpp.
// Reference: llm.c layernorm_forward/layernorm_backward (dev/cuda), Apex/Transformer Engine
// layer norm kernels, Megatron-Core RMSNorm.
// - forward and dx: one row per warp (h <= 1024) or per block (kernels/cuda/row_reduce.cuh);
//   two-pass mean/variance in acc_t<T>.
// - dgamma/dbeta: deterministic, no atomics. Kernel 1 writes per-chunk partial sums
//   partial[c, j] = Σ_{rows of chunk c} (dy·xhat, dy) with chunks of norm_rows_per_chunk(n) rows
//   (each block: 32 columns × 8 row lanes, lanes combined in lane order); kernel 2 adds the
//   chunks in chunk order into dgamma/dbeta (optionally accumulating).
#include "core/cuda/cuda_utils.h"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/norm.h"

namespace strata::kernels::cuda {
namespace {
using rowred::Scratch;

template <typename A> __device__ __forceinline__ A rsqrt_acc(A v) { return A(1) / sqrt(v); }

// ---- forward: y = (x - mean)·rstd·g (+ beta); LayerNorm when kCenter, else RMSNorm --------
template <int W, bool kCenter, typename T>
__global__ void __launch_bounds__(rowred::block_threads<W>())
    norm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
        T* __restrict__ y, acc_t<T>* __restrict__ mean, acc_t<T>* __restrict__ rstd, int64_t n, int64_t h,
        acc_t<T> eps, acc_t<T> gamma_shift) {
  using A = acc_t<T>;
  __shared__ Scratch<W, A> scratch;
  constexpr int kRows = rowred::rows_per_block<W>();
  const int t = threadIdx.x % W;
  for (int64_t r = int64_t(blockIdx.x) * kRows + threadIdx.x / W; r < n; r += int64_t(gridDim.x) * kRows) {
    const T* xr = x + r * h;
    A m = 0;
    if constexpr (kCenter) {
      A s = 0;
      for (int64_t j = t; j < h; j += W) s += convert<A>(xr[j]);
      m = rowred::row_sum<W>(s, scratch) / A(h);
    }
    A ss = 0;
    for (int64_t j = t; j < h; j += W) {
      A d = convert<A>(xr[j]) - m;
      ss += d * d;
    }
    const A rs = rsqrt_acc(rowred::row_sum<W>(ss, scratch) / A(h) + eps);
    T* yr = y + r * h;
    for (int64_t j = t; j < h; j += W) {
      A v = (convert<A>(xr[j]) - m) * rs * (convert<A>(gamma[j]) + gamma_shift);
      if constexpr (kCenter) v += convert<A>(beta[j]);
      yr[j] = convert<T>(v);
    }
    if (t == 0) {
      if constexpr (kCenter) mean[r] = m;
      rstd[r] = rs;
    }
  }
}

// ---- backward dx: dx = (g·dy - mean(g·dy) - xhat·mean(g·dy·xhat))·rstd  (RMSNorm: no mean(g·dy))
template <int W, bool kCenter, typename T>
__global__ void __launch_bounds__(rowred::block_threads<W>())
    norm_bwd_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ gamma,
        const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ rstd, T* __restrict__ dx, int64_t n,
        int64_t h, acc_t<T> gamma_shift) {
  using A = acc_t<T>;
  __shared__ Scratch<W, A> scratch;
  constexpr int kRows = rowred::rows_per_block<W>();
  const int t = threadIdx.x % W;
  for (int64_t r = int64_t(blockIdx.x) * kRows + threadIdx.x / W; r < n; r += int64_t(gridDim.x) * kRows) {
    const T* xr = x + r * h;
    const T* dyr = dy + r * h;
    const A m = kCenter ? mean[r] : A(0), rs = rstd[r];
    A s_gdy = 0, s_gdy_xhat = 0;
    for (int64_t j = t; j < h; j += W) {
      A gdy = (convert<A>(gamma[j]) + gamma_shift) * convert<A>(dyr[j]);
      s_gdy += gdy;
      s_gdy_xhat += gdy * (convert<A>(xr[j]) - m) * rs;
    }
    const A mean_gdy = kCenter ? rowred::row_sum<W>(s_gdy, scratch) / A(h) : A(0);
    const A mean_gdy_xhat = rowred::row_sum<W>(s_gdy_xhat, scratch) / A(h);
    T* dxr = dx + r * h;
    for (int64_t j = t; j < h; j += W) {
      A xhat = (convert<A>(xr[j]) - m) * rs;
      A gdy = (convert<A>(gamma[j]) + gamma_shift) * convert<A>(dyr[j]);
      dxr[j] = convert<T>((gdy - mean_gdy - xhat * mean_gdy_xhat) * rs);
    }
  }
}

// ---- backward dgamma/dbeta, step 1: per-chunk partial sums --------------------------------
constexpr int kCols = 32, kLanes = 8;  // block: kCols columns × kLanes row lanes

template <bool kCenter, typename T>
__global__ void __launch_bounds__(kCols * kLanes)
    norm_bwd_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x,
        const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ rstd,
        acc_t<T>* __restrict__ partial_g, acc_t<T>* __restrict__ partial_b, int64_t n, int64_t h,
        int64_t rows_per_chunk) {
  using A = acc_t<T>;
  __shared__ A sg[kLanes][kCols + 1];
  __shared__ A sb[kLanes][kCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = int64_t(blockIdx.x) * kCols + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < n ? begin + rows_per_chunk : n;
  A acc_g = 0, acc_b = 0;
  if (col < h) {
    for (int64_t r = begin + ty; r < end; r += kLanes) {
      const A m = kCenter ? mean[r] : A(0);
      A d = convert<A>(dy[r * h + col]);
      acc_g += d * (convert<A>(x[r * h + col]) - m) * rstd[r];
      acc_b += d;
    }
  }
  sg[ty][tx] = acc_g;
  sb[ty][tx] = acc_b;
  __syncthreads();
  if (ty == 0 && col < h) {
    A g = 0, b = 0;
#pragma unroll
    for (int k = 0; k < kLanes; ++k) {
      g += sg[k][tx];
      b += sb[k][tx];
    }
    partial_g[chunk * h + col] = g;
    if constexpr (kCenter) partial_b[chunk * h + col] = b;
  }
}

// ---- step 2: out[j] = (accumulate ? out[j] : 0) + Σ_c partial[c, j] in chunk order -----------
template <typename A, typename G>
__global__ void reduce_chunks_kernel(const A* __restrict__ partial, G* __restrict__ out, int64_t chunks,
                                     int64_t h, bool accumulate) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < h; j += int64_t(gridDim.x) * blockDim.x) {
    A s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * h + j];
    if (accumulate) s += convert<A>(out[j]);
    out[j] = convert<G>(s);
  }
}

template <typename T>
const T* cptr(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T>
T* mptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

template <bool kCenter>
void norm_forward(const Tensor& x, const Tensor& gamma, const Tensor* beta, const Tensor& y, const Tensor* mean,
                  const Tensor& rstd, const NormOptions& opt) {
  const int64_t h = x.size(-1), n = x.numel() / h;
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), kCenter ? "layernorm_forward" : "rmsnorm_forward", [&](auto tag) {
    STRATA_SCALAR(tag);
    using A = acc_t<scalar_t>;
    rowred::with_row_width(h, [&](auto w) {
      constexpr int W = decltype(w)::value;
      norm_fwd_kernel<W, kCenter, scalar_t>
          <<<rowred::row_grid<W>(n), rowred::block_threads<W>(), 0, s>>>(
              cptr<scalar_t>(x), cptr<scalar_t>(gamma), beta ? cptr<scalar_t>(*beta) : nullptr, mptr<scalar_t>(y),
              mean ? mptr<A>(*mean) : nullptr, mptr<A>(rstd), n, h, static_cast<A>(opt.eps),
              A(opt.zero_centered_gamma ? 1 : 0));
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

template <bool kCenter>
void norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor* mean, const Tensor& rstd,
                   const Tensor& dx, const Tensor& dgamma, const Tensor* dbeta, const NormOptions& opt,
                   bool accumulate) {
  const int64_t h = x.size(-1), n = x.numel() / h;
  const int64_t rows_per_chunk = norm_rows_per_chunk(n);
  const int64_t chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  cudaStream_t s = cuda_rt::current_stream(x.device().index);
  dispatch_float(x.dtype(), kCenter ? "layernorm_backward" : "rmsnorm_backward", [&](auto tag) {
    STRATA_SCALAR(tag);
    using A = acc_t<scalar_t>;
    const A shift = A(opt.zero_centered_gamma ? 1 : 0);
    const A* mean_p = mean ? cptr<A>(*mean) : nullptr;
    Tensor partial_g, partial_b;
    if (n > 0) {
      rowred::with_row_width(h, [&](auto w) {
        constexpr int W = decltype(w)::value;
        norm_bwd_dx_kernel<W, kCenter, scalar_t><<<rowred::row_grid<W>(n), rowred::block_threads<W>(), 0, s>>>(
            cptr<scalar_t>(dy), cptr<scalar_t>(x), cptr<scalar_t>(gamma), mean_p, cptr<A>(rstd),
            mptr<scalar_t>(dx), n, h, shift);
        STRATA_CUDA_LAUNCH_CHECK();
      });
      const DType acc_dtype = dtype_of<A>();
      partial_g = Tensor::empty({chunks, h}, acc_dtype, x.device());
      if (kCenter) partial_b = Tensor::empty({chunks, h}, acc_dtype, x.device());
      dim3 grid(static_cast<unsigned>((h + kCols - 1) / kCols), static_cast<unsigned>(chunks));
      norm_bwd_partial_kernel<kCenter, scalar_t><<<grid, dim3(kCols, kLanes), 0, s>>>(
          cptr<scalar_t>(dy), cptr<scalar_t>(x), mean_p, cptr<A>(rstd), mptr<A>(partial_g),
          kCenter ? mptr<A>(partial_b) : nullptr, n, h, rows_per_chunk);
      STRATA_CUDA_LAUNCH_CHECK();
    }
    auto reduce = [&](const Tensor& partial, const Tensor& out) {
      const A* pp = n > 0 ? cptr<A>(partial) : nullptr;
      const unsigned blocks = cuda_rt::grid_for(h, 256);
      if (out.dtype() == DType::F32) {
        reduce_chunks_kernel<A, float><<<blocks, 256, 0, s>>>(pp, mptr<float>(out), chunks, h, accumulate);
      } else {
        reduce_chunks_kernel<A, scalar_t><<<blocks, 256, 0, s>>>(pp, mptr<scalar_t>(out), chunks, h, accumulate);
      }
      STRATA_CUDA_LAUNCH_CHECK();
    };
    reduce(partial_g, dgamma);
    if (kCenter) reduce(partial_b, *dbeta);
  });
}
}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, const NormOptions& opt) {
  norm_forward<true>(x, gamma, &beta, y, &mean, rstd, opt);
}
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const NormOptions& opt, bool accumulate) {
  norm_backward<true>(dy, x, gamma, &mean, rstd, dx, dgamma, &dbeta, opt, accumulate);
}
void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd,
                     const NormOptions& opt) {
  norm_forward<false>(x, gamma, nullptr, y, nullptr, rstd, opt);
}
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dgamma, const NormOptions& opt, bool accumulate) {
  norm_backward<false>(dy, x, gamma, nullptr, rstd, dx, dgamma, nullptr, opt, accumulate);
}

}  // namespace strata::kernels::cuda
