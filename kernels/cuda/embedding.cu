// CUDA embedding lookup and weight gradient (kernels/embedding.h); CPU reference in
// kernels/cpu/embedding.cpp. Forward: one block per output row, 16-byte vector copies when rows are
// aligned. Backward (deterministic, no atomics): stable radix sort of (local row, position) pairs
// with cub::DeviceRadixSort::SortPairs, then one block per weight row that binary-searches its
// segment and sums the dout rows in position order in f32 (f64 for f64).
// Reference: Megatron-Core VocabParallelEmbedding, llm.c encoder_backward (deterministic variant).
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "core/cuda/cuda_utils.h"
#include "kernels/embedding.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kBlock = 256;

// out[i, :] = weight[ids[i] - vocab_start, :] or zeros; V is the copy unit (T or a 16-byte vector).
// bad_id (may be null) is set to 1 when some id lies outside [0, vocab_size_global).
template <typename V, typename I>
__global__ void embedding_forward_kernel(const I* ids, const V* weight, V* out, int64_t n, int64_t v,
                                         int64_t row_units, int64_t vocab_start, int64_t vocab_size_global,
                                         int* bad_id) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    if (bad_id && threadIdx.x == 0 && (id < 0 || id >= vocab_size_global)) *bad_id = 1;
    const int64_t r = id - vocab_start;
    V* dst = out + i * row_units;
    if (r >= 0 && r < v) {
      const V* src = weight + r * row_units;
      for (int64_t j = threadIdx.x; j < row_units; j += blockDim.x) dst[j] = src[j];
    } else {
      V zero;
      memset(&zero, 0, sizeof(V));
      for (int64_t j = threadIdx.x; j < row_units; j += blockDim.x) dst[j] = zero;
    }
  }
}

// Sort keys: the local row of each position, or v (sorts last, ignored) when the id is not local.
template <typename I>
__global__ void embedding_keys_kernel(const I* ids, int32_t* keys, int32_t* positions, int64_t n, int64_t v,
                                      int64_t vocab_start) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = static_cast<int64_t>(ids[i]) - vocab_start;
    keys[i] = (r >= 0 && r < v) ? static_cast<int32_t>(r) : static_cast<int32_t>(v);
    positions[i] = static_cast<int32_t>(i);
  }
}

// First index k in sorted keys[0, n) with keys[k] >= value.
__device__ __forceinline__ int64_t lower_bound(const int32_t* keys, int64_t n, int32_t value) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// One block per weight row r: dweight[r] (+)= Σ dout[p] over p in r's segment, in position order.
template <typename T>
__global__ void embedding_backward_kernel(const int32_t* sorted_keys, const int32_t* sorted_positions,
                                          const T* dout, T* dweight, int64_t n, int64_t v, int64_t h,
                                          bool accumulate) {
  using acc = acc_t<T>;
  __shared__ int64_t segment[2];
  for (int64_t r = blockIdx.x; r < v; r += gridDim.x) {
    __syncthreads();  // segment[] of the previous row is no longer read
    if (threadIdx.x == 0) {
      segment[0] = lower_bound(sorted_keys, n, static_cast<int32_t>(r));
      segment[1] = lower_bound(sorted_keys, n, static_cast<int32_t>(r + 1));
    }
    __syncthreads();
    const int64_t lo = segment[0], hi = segment[1];
    T* dst = dweight + r * h;
    if (lo == hi) {
      if (!accumulate)
        for (int64_t j = threadIdx.x; j < h; j += blockDim.x) dst[j] = convert<T>(0.0f);
      continue;
    }
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      acc sum = acc(0);
      for (int64_t k = lo; k < hi; ++k) sum += convert<acc>(dout[static_cast<int64_t>(sorted_positions[k]) * h + j]);
      dst[j] = convert<T>(accumulate ? convert<acc>(dst[j]) + sum : sum);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 0x7fffffff ? 0x7fffffff : rows));
}

template <typename F>
void dispatch_ids(const Tensor& ids, F&& f) {
  if (ids.dtype() == DType::I64) f(static_cast<const int64_t*>(ids.data_ptr()));
  else f(static_cast<const int32_t*>(ids.data_ptr()));
}
}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, int64_t vocab_start,
                       int64_t vocab_size_global) {
  const int64_t n = ids.numel(), v = weight.size(0), h = weight.size(1);
  if (n == 0 || h == 0) return;
  const int device = ids.device().index;
  cudaStream_t s = cuda_rt::current_stream(device);
  const bool check = vocab_size_global > 0;
  Tensor flag;
  if (check) {
    flag = Tensor::empty({1}, DType::I32, ids.device());
    STRATA_CUDA_CHECK(cudaMemsetAsync(flag.data_ptr(), 0, sizeof(int32_t), s));
  }
  int* bad_id = check ? static_cast<int*>(flag.data_ptr()) : nullptr;
  const size_t row_bytes = h * weight.element_size();
  const bool vec = row_bytes % 16 == 0 && aligned16(weight.data_ptr()) && aligned16(out.data_ptr());
  const int64_t row_units = vec ? static_cast<int64_t>(row_bytes / 16) : h;
  const int block = row_units >= kBlock ? kBlock : (row_units >= 64 ? 64 : 32);
  dispatch_ids(ids, [&](const auto* idp) {
    if (vec) {
      embedding_forward_kernel<uint4><<<row_grid(n), block, 0, s>>>(
          idp, static_cast<const uint4*>(weight.data_ptr()), static_cast<uint4*>(out.data_ptr()), n, v, row_units,
          vocab_start, vocab_size_global, bad_id);
      STRATA_CUDA_LAUNCH_CHECK();
    } else {
      dispatch_float(weight.dtype(), "embedding_forward", [&](auto tag_) {
        STRATA_SCALAR(tag_);
        embedding_forward_kernel<scalar_t><<<row_grid(n), block, 0, s>>>(
            idp, static_cast<const scalar_t*>(weight.data_ptr()), static_cast<scalar_t*>(out.data_ptr()), n, v,
            row_units, vocab_start, vocab_size_global, bad_id);
        STRATA_CUDA_LAUNCH_CHECK();
      });
    }
  });
  if (check) {
    int32_t host_flag = 0;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(&host_flag, bad_id, sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(s));
    if (host_flag) {
      // Error path only: find the first offending id on the host for the message.
      std::vector<double> host_ids = ids.to_vector();
      for (size_t i = 0; i < host_ids.size(); ++i)
        STRATA_CHECK(host_ids[i] >= 0 && host_ids[i] < static_cast<double>(vocab_size_global),
                     "embedding_forward: ids[", i, "] = ", static_cast<int64_t>(host_ids[i]),
                     " is outside the vocabulary [0, ", vocab_size_global, ")");
      STRATA_THROW("embedding_forward: an id is outside the vocabulary [0, ", vocab_size_global, ")");
    }
  }
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dweight, bool accumulate,
                        int64_t vocab_start) {
  const int64_t n = ids.numel(), v = dweight.size(0), h = dweight.size(1);
  if (v == 0 || h == 0) return;
  const Device dev = ids.device();
  cudaStream_t s = cuda_rt::current_stream(dev.index);
  // keys/positions in, sorted keys/positions out.
  Tensor pairs = Tensor::empty({4, n > 0 ? n : 1}, DType::I32, dev);
  int32_t* keys = static_cast<int32_t*>(pairs.data_ptr());
  int32_t* positions = keys + pairs.size(1);
  int32_t* sorted_keys = positions + pairs.size(1);
  int32_t* sorted_positions = sorted_keys + pairs.size(1);
  if (n > 0) {
    dispatch_ids(ids, [&](const auto* idp) {
      embedding_keys_kernel<<<cuda_rt::grid_for(n, kBlock), kBlock, 0, s>>>(idp, keys, positions, n, v, vocab_start);
      STRATA_CUDA_LAUNCH_CHECK();
    });
    int end_bit = 1;  // bits needed for keys in [0, v]
    while (end_bit < 32 && (int64_t(1) << end_bit) <= v) ++end_bit;
    const int num_items = static_cast<int>(n);
    size_t temp_bytes = 0;
    STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, sorted_keys, positions,
                                                      sorted_positions, num_items, 0, end_bit, s));
    Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes > 0 ? temp_bytes : 1)}, DType::U8, dev);
    STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, keys, sorted_keys, positions,
                                                      sorted_positions, num_items, 0, end_bit, s));
  }
  const int block = h >= kBlock ? kBlock : (h >= 64 ? 64 : 32);
  dispatch_float(dweight.dtype(), "embedding_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    embedding_backward_kernel<scalar_t><<<row_grid(v), block, 0, s>>>(
        sorted_keys, sorted_positions, static_cast<const scalar_t*>(dout.data_ptr()),
        static_cast<scalar_t*>(dweight.data_ptr()), n, v, h, accumulate);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::kernels::cuda
