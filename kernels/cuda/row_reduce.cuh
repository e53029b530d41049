// Row-wise reductions for CUDA kernels that process one row of a [n, h] tensor per group of
// kThreadsPerRow threads (used by kernels/cuda/norm.cu and kernels/cuda/softmax.cu).
// kThreadsPerRow == 32: one warp per row, several rows per block, no __syncthreads.
// kThreadsPerRow  > 32: one row per block (blockDim.x == kThreadsPerRow), warps combined through
// shared memory. Every reduction has a fixed order, and the xor butterfly leaves the identical
// value in every lane (a + b == b + a exactly), so all threads of a row see the same result.
// Reference: the warp/block reductions of llm.c (dev/cuda/common.h) and Apex/TE layer norm.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace strata::kernels::cuda::rowred {

constexpr int kBlockThreads = 256;  // threads per block for the row-per-warp mode

template <typename A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
template <typename A> __device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Shared scratch for the block reductions: one slot per warp.
template <int kThreadsPerRow, typename A> struct Scratch {
  A warp[kThreadsPerRow > 32 ? kThreadsPerRow / 32 : 1];
};

// Sum of v over the threads of the row. In block mode every thread of the block must call it.
template <int kThreadsPerRow, typename A>
__device__ __forceinline__ A row_sum(A v, Scratch<kThreadsPerRow, A>& s) {
  v = warp_sum(v);
  if constexpr (kThreadsPerRow == 32) {
    return v;
  } else {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // the previous reduction's readers are done with the scratch
    if (lane == 0) s.warp[warp] = v;
    __syncthreads();
    A total = 0;
#pragma unroll
    for (int w = 0; w < kThreadsPerRow / 32; ++w) total += s.warp[w];
    return total;
  }
}

template <int kThreadsPerRow, typename A>
__device__ __forceinline__ A row_max(A v, Scratch<kThreadsPerRow, A>& s) {
  v = warp_max(v);
  if constexpr (kThreadsPerRow == 32) {
    return v;
  } else {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) s.warp[warp] = v;
    __syncthreads();
    A m = s.warp[0];
#pragma unroll
    for (int w = 1; w < kThreadsPerRow / 32; ++w) m = fmax(m, s.warp[w]);
    return m;
  }
}

// Rows handled by one block and the block size for a row-group width.
template <int kThreadsPerRow> constexpr int rows_per_block() {
  return kThreadsPerRow == 32 ? kBlockThreads / 32 : 1;
}
template <int kThreadsPerRow> constexpr int block_threads() {
  return kThreadsPerRow == 32 ? kBlockThreads : kThreadsPerRow;
}

// Blocks for n rows; kernels loop `for (row = first; row < n; row += stride)` so any n works.
template <int kThreadsPerRow> inline unsigned row_grid(int64_t n) {
  int64_t g = (n + rows_per_block<kThreadsPerRow>() - 1) / rows_per_block<kThreadsPerRow>();
  const int64_t kMax = int64_t(1) << 20;
  return static_cast<unsigned>(g < 1 ? 1 : (g > kMax ? kMax : g));
}

// Calls f(std::integral_constant<int, W>{}) with the row-group width W for rows of length h:
// a warp up to 1024 elements, 256 threads up to 8192, 1024 threads beyond.
template <typename F> void with_row_width(int64_t h, F&& f) {
  if (h <= 1024) f(std::integral_constant<int, 32>{});
  else if (h <= 8192) f(std::integral_constant<int, 256>{});
  else f(std::integral_constant<int, 1024>{});
}

}  // namespace strata::kernels::cuda::rowred
