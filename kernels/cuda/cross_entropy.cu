// CUDA fused softmax cross-entropy (kernels/cross_entropy.h); CPU reference in
// kernels/cpu/cross_entropy.cpp. One block per row (vocabularies of 50k+ columns), 16-byte vector
// loads when the rows are aligned, and a fixed reduction order (per-thread strided partials, then a
// warp-shuffle tree and a tree over warps) so results are deterministic run to run.
// Reference: Megatron-Core VocabParallelCrossEntropy, llm.c fused_classifier.
#include <cstdint>

#include "core/cuda/cuda_utils.h"
#include "kernels/cross_entropy.h"
#include "kernels/cross_entropy_math.h"

namespace strata::kernels::cuda {
namespace {
__device__ __forceinline__ float ce_exp(float x) { return expf(x); }
__device__ __forceinline__ double ce_exp(double x) { return exp(x); }
template <typename S> __device__ __forceinline__ S neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() {
  return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));
}

struct MaxOp {
  template <typename S> __device__ __forceinline__ S operator()(S a, S b) const { return a > b ? a : (b > a ? b : a); }
};
struct SumOp {
  template <typename S> __device__ __forceinline__ S operator()(S a, S b) const { return a + b; }
};

// Reduces one value per thread over the block (blockDim.x a multiple of 32, at most 1024) in a fixed
// order; every thread gets the result. smem must hold 33 values.
template <typename S, typename Op>
__device__ S block_reduce(S v, Op op, S identity, S* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();  // smem of a previous reduction is no longer read
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? smem[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) smem[32] = v;
  }
  __syncthreads();
  return smem[32];
}

// Calls f(column, value) for this thread's columns of a row, in a fixed order; VEC: 16-byte loads
// (the caller guarantees v·sizeof(T) % 16 == 0 and a 16-byte aligned base).
template <bool VEC, typename T, typename F>
__device__ __forceinline__ void for_each_column(const T* row, int64_t v, F&& f) {
  if constexpr (VEC) {
    constexpr int kPer = 16 / sizeof(T);
    const uint4* r4 = reinterpret_cast<const uint4*>(row);
    for (int64_t k = threadIdx.x; k < v / kPer; k += blockDim.x) {
      uint4 u = r4[k];
      const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int q = 0; q < kPer; ++q) f(k * kPer + q, e[q]);
    }
  } else {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) f(j, row[j]);
  }
}

template <bool VEC, typename T, typename S>
__device__ __forceinline__ S row_max(const T* row, int64_t v, S* smem) {
  S m = neg_inf<S>();
  for_each_column<VEC>(row, v, [&](int64_t, T x) { m = MaxOp()(m, convert<S>(x)); });
  return block_reduce(m, MaxOp(), neg_inf<S>(), smem);
}
template <bool VEC, typename T, typename S>
__device__ __forceinline__ S row_sum_exp(const T* row, int64_t v, S m, S* smem) {
  S s = S(0);
  for_each_column<VEC>(row, v, [&](int64_t, T x) { s += ce_exp(convert<S>(x) - m); });
  return block_reduce(s, SumOp(), S(0), smem);
}

template <bool VEC, typename T>
__global__ void ce_max_kernel(const T* logits, acc_t<T>* row_max_out, int64_t n, int64_t v) {
  using S = acc_t<T>;
  __shared__ S smem[33];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    S m = row_max<VEC>(logits + i * v, v, smem);
    if (threadIdx.x == 0) row_max_out[i] = m;
  }
}

template <bool VEC, typename T>
__global__ void ce_sum_exp_kernel(const T* logits, const int64_t* targets, const acc_t<T>* row_max_in,
                                  acc_t<T>* sum_exp, acc_t<T>* target_logit, int64_t n, int64_t v,
                                  int64_t vocab_start) {
  using S = acc_t<T>;
  __shared__ S smem[33];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t t = targets[i];
    if (t < 0) {  // ignored row (uniform across the block)
      if (threadIdx.x == 0) sum_exp[i] = target_logit[i] = S(0);
      continue;
    }
    const T* row = logits + i * v;
    S s = row_sum_exp<VEC>(row, v, row_max_in[i], smem);
    if (threadIdx.x == 0) {
      const int64_t c = ce::local_target(t, vocab_start, v);
      sum_exp[i] = s;
      target_logit[i] = c >= 0 ? convert<S>(row[c]) : S(0);
    }
  }
}

template <typename S>
__global__ void ce_loss_kernel(const S* row_max, const S* sum_exp, const S* target_logit, S* loss, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    loss[i] = ce::loss(row_max[i], sum_exp[i], target_logit[i]);
}

template <bool VEC, typename T>
__global__ void ce_forward_kernel(const T* logits, const int64_t* targets, acc_t<T>* loss, acc_t<T>* row_max_out,
                                  acc_t<T>* sum_exp, int64_t n, int64_t v, int64_t vocab_start) {
  using S = acc_t<T>;
  __shared__ S smem[33];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T* row = logits + i * v;
    const S m = row_max<VEC>(row, v, smem);
    const int64_t t = targets[i];
    if (t < 0) {
      if (threadIdx.x == 0) {
        row_max_out[i] = m;
        sum_exp[i] = loss[i] = S(0);
      }
      continue;
    }
    const S s = row_sum_exp<VEC>(row, v, m, smem);
    if (threadIdx.x == 0) {
      const int64_t c = ce::local_target(t, vocab_start, v);
      row_max_out[i] = m;
      sum_exp[i] = s;
      loss[i] = ce::loss(m, s, c >= 0 ? convert<S>(row[c]) : S(0));
    }
  }
}

// dlogits = (softmax - on_target·onehot - uniform)·dloss, row by row; dlogits may alias logits (each
// thread reads its elements before writing the same elements).
template <bool VEC, typename T>
__global__ void ce_backward_kernel(const T* logits, const int64_t* targets, const acc_t<T>* row_max,
                                   const acc_t<T>* sum_exp, const acc_t<T>* dloss, T* dlogits, int64_t n, int64_t v,
                                   int64_t vocab_start, acc_t<T> on_target, acc_t<T> uniform) {
  using S = acc_t<T>;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t t = targets[i];
    const T* row = logits + i * v;
    T* drow = dlogits + i * v;
    const bool ignored = t < 0;
    const S inv = ignored ? S(0) : S(1) / sum_exp[i], g = dloss[i], m = row_max[i];
    const int64_t c = ce::local_target(t, vocab_start, v);
    auto grad = [&](int64_t j, T x) -> T {
      if (ignored) return convert<T>(0.0f);
      S p = ce_exp(convert<S>(x) - m) * inv;
      S d = p - uniform - (j == c ? on_target : S(0));
      return convert<T>(d * g);
    };
    if constexpr (VEC) {
      constexpr int kPer = 16 / sizeof(T);
      const uint4* r4 = reinterpret_cast<const uint4*>(row);
      uint4* d4 = reinterpret_cast<uint4*>(drow);
      for (int64_t k = threadIdx.x; k < v / kPer; k += blockDim.x) {
        uint4 in = r4[k], out;
        const T* e = reinterpret_cast<const T*>(&in);
        T* o = reinterpret_cast<T*>(&out);
#pragma unroll
        for (int q = 0; q < kPer; ++q) o[q] = grad(k * kPer + q, e[q]);
        d4[k] = out;
      }
    } else {
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) drow[j] = grad(j, row[j]);
    }
  }
}

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 0x7fffffff ? 0x7fffffff : rows));
}
// Threads per row block: a fixed function of the row length (the reduction order depends on it).
int row_block(int64_t v) { return v >= 4096 ? 512 : 128; }

bool vectorizable(const Tensor& t, const Tensor* other = nullptr) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool rows = (t.size(1) * static_cast<int64_t>(t.element_size())) % 16 == 0;
  return rows && aligned(t.data_ptr()) && (!other || aligned(other->data_ptr()));
}

// Calls f(TypeTag<T>, std::bool_constant<VEC>) for the logits dtype and the vector decision.
template <typename F>
void dispatch_row_kernel(const Tensor& logits, bool vec, const char* op, F&& f) {
  dispatch_float(logits.dtype(), op, [&](auto tag_) {
    if (vec) f(tag_, std::true_type{});
    else f(tag_, std::false_type{});
  });
}
}  // namespace

void cross_entropy_max(const Tensor& logits, const Tensor& row_max) {
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(logits.device().index);
  dispatch_row_kernel(logits, vectorizable(logits), "cross_entropy_max", [&](auto tag_, auto vec_) {
    STRATA_SCALAR(tag_);
    using S = acc_t<scalar_t>;
    ce_max_kernel<decltype(vec_)::value, scalar_t><<<row_grid(n), row_block(v), 0, s>>>(
        static_cast<const scalar_t*>(logits.data_ptr()), static_cast<S*>(row_max.data_ptr()), n, v);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                           const Tensor& sum_exp, const Tensor& target_logit, int64_t vocab_start) {
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(logits.device().index);
  dispatch_row_kernel(logits, vectorizable(logits), "cross_entropy_sum_exp", [&](auto tag_, auto vec_) {
    STRATA_SCALAR(tag_);
    using S = acc_t<scalar_t>;
    ce_sum_exp_kernel<decltype(vec_)::value, scalar_t><<<row_grid(n), row_block(v), 0, s>>>(
        static_cast<const scalar_t*>(logits.data_ptr()), static_cast<const int64_t*>(targets.data_ptr()),
        static_cast<const S*>(row_max.data_ptr()), static_cast<S*>(sum_exp.data_ptr()),
        static_cast<S*>(target_logit.data_ptr()), n, v, vocab_start);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        const Tensor& loss) {
  const int64_t n = row_max.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(row_max.device().index);
  auto launch = [&](auto zero) {
    using S = decltype(zero);
    ce_loss_kernel<S><<<cuda_rt::grid_for(n, 256), 256, 0, s>>>(
        static_cast<const S*>(row_max.data_ptr()), static_cast<const S*>(sum_exp.data_ptr()),
        static_cast<const S*>(target_logit.data_ptr()), static_cast<S*>(loss.data_ptr()), n);
    STRATA_CUDA_LAUNCH_CHECK();
  };
  if (row_max.dtype() == DType::F64) launch(0.0);
  else launch(0.0f);
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& loss,
                           const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start) {
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  cudaStream_t s = cuda_rt::current_stream(logits.device().index);
  dispatch_row_kernel(logits, vectorizable(logits), "cross_entropy_forward", [&](auto tag_, auto vec_) {
    STRATA_SCALAR(tag_);
    using S = acc_t<scalar_t>;
    ce_forward_kernel<decltype(vec_)::value, scalar_t><<<row_grid(n), row_block(v), 0, s>>>(
        static_cast<const scalar_t*>(logits.data_ptr()), static_cast<const int64_t*>(targets.data_ptr()),
        static_cast<S*>(loss.data_ptr()), static_cast<S*>(row_max.data_ptr()), static_cast<S*>(sum_exp.data_ptr()),
        n, v, vocab_start);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                            const Tensor& sum_exp, const Tensor& dloss, const Tensor& dlogits,
                            int64_t vocab_start, double label_smoothing, int64_t vocab_size_global) {
  const int64_t n = logits.size(0), v = logits.size(1);
  if (n == 0) return;
  const ce::Smoothing sm = ce::Smoothing::make(label_smoothing, vocab_size_global > 0 ? vocab_size_global : v);
  cudaStream_t s = cuda_rt::current_stream(logits.device().index);
  dispatch_row_kernel(logits, vectorizable(logits, &dlogits), "cross_entropy_backward", [&](auto tag_, auto vec_) {
    STRATA_SCALAR(tag_);
    using S = acc_t<scalar_t>;
    ce_backward_kernel<decltype(vec_)::value, scalar_t><<<row_grid(n), row_block(v), 0, s>>>(
        static_cast<const scalar_t*>(logits.data_ptr()), static_cast<const int64_t*>(targets.data_ptr()),
        static_cast<const S*>(row_max.data_ptr()), static_cast<const S*>(sum_exp.data_ptr()),
        static_cast<const S*>(dloss.data_ptr()), static_cast<scalar_t*>(dlogits.data_ptr()), n, v, vocab_start,
        static_cast<S>(sm.on_target), static_cast<S>(sm.uniform));
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::kernels::cuda
