// CUDA optimizer kernels (kernels/optimizer.h); CPU reference in kernels/cpu/optimizer.cpp.
// AdamW: grid-stride elementwise update (math in float; double for f64) through
// kernels/optimizer_math.h, optionally writing the low-precision model copy.
// Sum of squares: a fixed-grid two-pass reduction, no atomics: pass 1 runs one kernel per grad
// with a block count that depends only on the grad's size, each block writing its double partial
// into its own slot; pass 2 reduces all partials in one block in a fixed order. The result is
// therefore bitwise reproducible run to run (and independent of the GPU model).
// Reference: llm.c adamw_kernel3 and global_norm_squared (two-pass deterministic norm),
// apex multi_tensor_adam / multi_tensor_l2norm, Megatron-Core optimizer/clip_grads.py.
#include <vector>

#include "core/cuda/cuda_utils.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_math.h"
#include "kernels/scale_grads.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kThreads = 256;          // block size of every kernel here (a power of two)
constexpr int64_t kMaxSumBlocks = 256;  // pass-1 blocks per grad at most
constexpr int64_t kPerThread = 8;       // pass-1 elements per thread before adding a block

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T, typename TM>
__global__ void adamw_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                             TM* __restrict__ model, int64_t n, adamw::Coeffs<acc_t<T>> c) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) {
    acc mi = convert<acc>(m[i]), vi = convert<acc>(v[i]);
    const acc pi = adamw::update<acc>(convert<acc>(p[i]), convert<acc>(g[i]), mi, vi, c);
    const T pn = convert<T>(pi);
    p[i] = pn;
    m[i] = convert<T>(mi);
    v[i] = convert<T>(vi);
    if (model) model[i] = convert<TM>(pn);
  }
}

// Sums `val` over the block in a fixed tree order; the result is valid in thread 0.
__device__ double block_sum(double val) {
  __shared__ double buf[kThreads];
  buf[threadIdx.x] = val;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
    __syncthreads();
  }
  return buf[0];
}

// Pass 1: partials[b] = Σ g² over the elements block b visits (grid-stride, fixed grid).
template <typename T>
__global__ void sum_squares_partial_kernel(const T* __restrict__ g, int64_t n, double* __restrict__ partials) {
  double s = 0.0;
  GRID_STRIDE(i, n) {
    const double x = static_cast<double>(convert<acc_t<T>>(g[i]));
    s += x * x;
  }
  const double total = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Pass 2: out = Σ partials, one block, fixed order.
template <typename TO>
__global__ void sum_partials_kernel(const double* __restrict__ partials, int64_t count, TO* __restrict__ out) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) s += partials[i];
  const double total = block_sum(s);
  if (threadIdx.x == 0) *out = static_cast<TO>(total);
}

template <typename T>
__global__ void scale_kernel(T* __restrict__ g, int64_t n, acc_t<T> factor) {
  using acc = acc_t<T>;
  GRID_STRIDE(i, n) g[i] = convert<T>(convert<acc>(g[i]) * factor);
}

__device__ __forceinline__ bool finite_value(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}
__device__ __forceinline__ bool finite_value(double x) {
  return (static_cast<unsigned long long>(__double_as_longlong(x)) & 0x7ff0000000000000ull) !=
         0x7ff0000000000000ull;
}

// flag is zeroed before the launch; any thread that sees NaN/Inf stores 1 (same value, no atomics).
template <typename T>
__global__ void non_finite_kernel(const T* __restrict__ x, int64_t n, int* __restrict__ flag) {
  bool bad = false;
  GRID_STRIDE(i, n) bad |= !finite_value(convert<acc_t<T>>(x[i]));
  if (bad) *flag = 1;
}

// Pass-1 block count for a grad of n elements: a function of n only (deterministic).
int64_t sum_blocks_for(int64_t n) {
  const int64_t b = (n + kThreads * kPerThread - 1) / (kThreads * kPerThread);
  return b < 1 ? 1 : (b > kMaxSumBlocks ? kMaxSumBlocks : b);
}
}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWConfig& cfg, int64_t step, double weight_decay_mult, double grad_scale,
                const Tensor* model_param) {
  const int64_t n = param.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(param.device().index);
  const unsigned grid = cuda_rt::grid_for(n, kThreads);
  auto launch = [&](auto tag_, auto mtag_) {
    STRATA_SCALAR(tag_);
    using model_t = typename decltype(mtag_)::type;
    using acc = acc_t<scalar_t>;
    const auto c = adamw::make_coeffs<acc>(cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, step,
                                           weight_decay_mult, grad_scale);
    model_t* model = model_param ? static_cast<model_t*>(model_param->data_ptr()) : nullptr;
    adamw_kernel<scalar_t, model_t><<<grid, kThreads, 0, s>>>(
        static_cast<scalar_t*>(param.data_ptr()), static_cast<const scalar_t*>(grad.data_ptr()),
        static_cast<scalar_t*>(exp_avg.data_ptr()), static_cast<scalar_t*>(exp_avg_sq.data_ptr()), model, n, c);
    STRATA_CUDA_LAUNCH_CHECK();
  };
  auto with_master = [&](auto tag_) {
    if (!model_param) {
      launch(tag_, tag_);
      return;
    }
    dispatch_float(model_param->dtype(), "adamw_step model_param", [&](auto mtag_) { launch(tag_, mtag_); });
  };
  switch (param.dtype()) {
    case DType::F32: with_master(TypeTag<float>{}); break;
    case DType::F64: with_master(TypeTag<double>{}); break;
    default: throw_bad_dtype("adamw_step", param.dtype(), "f32 or f64");
  }
}

void grad_sum_of_squares(const std::vector<Tensor>& grads, const Tensor& out) {
  const int device = out.device().index;
  cudaStream_t s = cuda_rt::current_stream(device);
  int64_t total_blocks = 0;
  for (const Tensor& g : grads)
    if (g.numel() > 0) total_blocks += sum_blocks_for(g.numel());
  // Partials live on the same stream, so the caching allocator may reuse them only after pass 2.
  Tensor partials = Tensor::empty({total_blocks > 0 ? total_blocks : 1}, DType::F64, out.device());
  double* pp = partials.data<double>();
  int64_t offset = 0;
  for (const Tensor& g : grads) {
    const int64_t n = g.numel();
    if (n == 0) continue;
    const int64_t blocks = sum_blocks_for(n);
    dispatch_float(g.dtype(), "grad_sum_of_squares", [&](auto tag_) {
      STRATA_SCALAR(tag_);
      sum_squares_partial_kernel<scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
          static_cast<const scalar_t*>(g.data_ptr()), n, pp + offset);
      STRATA_CUDA_LAUNCH_CHECK();
    });
    offset += blocks;
  }
  if (out.dtype() == DType::F64) {
    sum_partials_kernel<double><<<1, kThreads, 0, s>>>(pp, total_blocks, out.data<double>());
  } else {
    sum_partials_kernel<float><<<1, kThreads, 0, s>>>(pp, total_blocks, out.data<float>());
  }
  STRATA_CUDA_LAUNCH_CHECK();
}

void scale_grads(const std::vector<Tensor>& grads, double factor) {
  for (const Tensor& g : grads) {
    const int64_t n = g.numel();
    if (n == 0) continue;
    cudaStream_t s = cuda_rt::current_stream(g.device().index);
    dispatch_float(g.dtype(), "scale_grads", [&](auto tag_) {
      STRATA_SCALAR(tag_);
      using acc = acc_t<scalar_t>;
      scale_kernel<scalar_t><<<cuda_rt::grid_for(n, kThreads), kThreads, 0, s>>>(
          static_cast<scalar_t*>(g.data_ptr()), n, static_cast<acc>(factor));
      STRATA_CUDA_LAUNCH_CHECK();
    });
  }
}

bool has_non_finite(const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return false;
  const int device = t.device().index;
  cudaStream_t s = cuda_rt::current_stream(device);
  Tensor flag = Tensor::empty({1}, DType::I32, t.device());
  int* fp = flag.data<int32_t>();
  STRATA_CUDA_CHECK(cudaMemsetAsync(fp, 0, sizeof(int), s));
  dispatch_float(t.dtype(), "has_non_finite", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    non_finite_kernel<scalar_t><<<cuda_rt::grid_for(n, kThreads), kThreads, 0, s>>>(
        static_cast<const scalar_t*>(t.data_ptr()), n, fp);
    STRATA_CUDA_LAUNCH_CHECK();
  });
  int host = 0;
  STRATA_CUDA_CHECK(cudaMemcpyAsync(&host, fp, sizeof(int), cudaMemcpyDeviceToHost, s));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(s));
  return host != 0;
}

}  // namespace strata::kernels::cuda
