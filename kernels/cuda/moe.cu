// CUDA MoE dispatch kernels (kernels/moe.h); CPU reference in kernels/cpu/moe.cpp. Deterministic,
// no atomics. Routing: one key per (token, slot) pair (its local expert, or E when dropped / not
// local), a stable cub::DeviceRadixSort of (key, pair) so that each expert's pairs stay in token
// order, expert bounds by binary search, one copy of the E + 1 bounds to the host (the grouped
// GEMM needs the counts there), then one thread per kept pair writes its row. Row ops: one block
// per output row (gather; its dot product reduced in a fixed tree, kernels/cuda/row_reduce.cuh)
// or per token (combine: thread 0 sorts the token's ≤ k rows into shared memory, then every
// thread sums its columns over them in ascending row order). Out-of-range table entries are
// treated as absent (the CPU backend reports them).
// Reference: Megatron-Core transformer/moe/moe_utils.py (permute, unpermute), embedding.cu here.
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_utils.h"
#include "kernels/cuda/row_reduce.cuh"
#include "kernels/moe.h"
#include "kernels/moe_rows.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kBlock = 256;
constexpr int64_t kMaxTopK = 4096;  // the combine keeps a token's rows in shared memory

template <typename T, typename P>
using moe_acc_t = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<P, double>, double, float>;

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 0x7fffffff ? 0x7fffffff : rows));
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// keys[p] = local expert of pair p or E; bad (set to 1) flags a negative or out-of-range id.
template <typename I>
__global__ void routing_keys_kernel(const I* ids, const uint8_t* keep, int32_t* keys, int32_t* pairs, int64_t n,
                                    int64_t experts, int64_t expert_start, int64_t experts_global, int64_t* bad) {
  GRID_STRIDE(p, n) {
    const int64_t id = static_cast<int64_t>(ids[p]);
    if (id < 0 || (experts_global > 0 && id >= experts_global)) *bad = 1;
    const int64_t e = id - expert_start;
    const bool local = (!keep || keep[p] != 0) && e >= 0 && e < experts;
    keys[p] = static_cast<int32_t>(local ? e : experts);
    pairs[p] = static_cast<int32_t>(p);
  }
}

__device__ __forceinline__ int64_t lower_bound(const int32_t* keys, int64_t n, int32_t value) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// starts[e] = first sorted position with key >= e, for e in [0, E].
__global__ void routing_bounds_kernel(const int32_t* sorted_keys, int64_t n, int64_t experts, int64_t* starts) {
  GRID_STRIDE(e, experts + 1) starts[e] = lower_bound(sorted_keys, n, static_cast<int32_t>(e));
}

// The kept pairs are sorted positions [0, kept): each writes its row (its position, or its
// expert's padded block offset plus its rank in the expert).
__global__ void routing_scatter_kernel(const int32_t* sorted_keys, const int32_t* sorted_pairs, const int64_t* starts,
                                       int64_t kept, int64_t k, int64_t capacity, int64_t* row_map,
                                       int64_t* pair_rows) {
  GRID_STRIDE(i, kept) {
    const int64_t e = sorted_keys[i], p = sorted_pairs[i];
    const int64_t row = capacity >= 0 ? e * capacity + (i - starts[e]) : i;
    row_map[row] = p / k;
    pair_rows[p] = row;
  }
}

// One block (kBlock threads) per output row; see moe_gather_rows in kernels/moe.h.
template <typename T, typename P, bool kDot>
__global__ void gather_rows_kernel(const T* src, int64_t src_rows, const int64_t* map, const P* scale, T* out,
                                   const T* dot_with, P* dscale, int64_t n, int64_t h) {
  using acc = moe_acc_t<T, P>;
  __shared__ rowred::Scratch<kBlock, acc> scratch;
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const int64_t s = map ? map[r] : r;
    const bool valid = s >= 0 && s < src_rows;
    const acc w = scale && valid ? static_cast<acc>(scale[r]) : acc(1);
    acc dot = acc(0);
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {  // element j read before it is written
      const acc v = valid ? convert<acc>(src[s * h + j]) : acc(0);
      if constexpr (kDot) dot += convert<acc>(dot_with[r * h + j]) * v;
      out[r * h + j] = convert<T>(w * v);
    }
    if constexpr (kDot) {
      dot = rowred::row_sum<kBlock, acc>(dot, scratch);
      if (threadIdx.x == 0) dscale[r] = valid ? static_cast<P>(dot) : P(0);
    }
  }
}

// One block per token: Σ weights[r]·src[r] over the token's rows in ascending r.
template <typename T, typename P>
__global__ void combine_rows_kernel(const T* src, int64_t src_rows, const int64_t* table, int64_t k,
                                    const P* weights, T* out, int64_t tokens, int64_t h) {
  using acc = moe_acc_t<T, P>;
  extern __shared__ int64_t rows[];  // [k rounded up to even]
  __shared__ int64_t count;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    __syncthreads();  // the previous token's rows are no longer read
    if (threadIdx.x == 0) {
      int64_t c = 0;
      for (int64_t s = 0; s < k; ++s) {  // insertion sort: k is small
        const int64_t r = table[t * k + s];
        if (r < 0 || r >= src_rows) continue;
        int64_t i = c++;
        while (i > 0 && rows[i - 1] > r) rows[i] = rows[i - 1], --i;
        rows[i] = r;
      }
      count = c;
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      acc sum = acc(0);
      for (int64_t i = 0; i < count; ++i) {
        const acc w = weights ? static_cast<acc>(weights[rows[i]]) : acc(1);
        sum += w * convert<acc>(src[rows[i] * h + j]);
      }
      out[t * h + j] = convert<T>(sum);
    }
  }
}

template <typename T>
__global__ void scatter_probs_kernel(const T* probs, const int64_t* table, T* out, int64_t pairs, int64_t n) {
  GRID_STRIDE(p, pairs) {
    const int64_t r = table[p];
    if (r >= 0 && r < n) out[r] = probs[p];
  }
}

template <typename T>
__global__ void gather_probs_kernel(const T* dpermuted, const int64_t* table, T* dprobs, int64_t pairs, int64_t n) {
  GRID_STRIDE(p, pairs) {
    const int64_t r = table[p];
    dprobs[p] = r >= 0 && r < n ? dpermuted[r] : convert<T>(0.0f);
  }
}

template <typename F>
void dispatch_weights(const Tensor* w, F&& f) {
  if (w && w->dtype() == DType::F64) f(TypeTag<double>{});
  else f(TypeTag<float>{});
}

template <typename P>
const P* weights_ptr(const Tensor* w) { return w ? static_cast<const P*>(w->data_ptr()) : nullptr; }

cudaStream_t stream_of(const Tensor& t) { return cuda_rt::current_stream(t.device().index); }

// Sorts the (key, pair) arrays of `work` ([4, n] i32: keys, pairs, sorted keys, sorted pairs).
void sort_pairs(const Tensor& work, int64_t n, int64_t experts, cudaStream_t s) {
  int32_t* keys = static_cast<int32_t*>(work.data_ptr());
  const int64_t stride = work.size(1);
  int end_bit = 1;  // bits for keys in [0, experts]
  while (end_bit < 32 && (int64_t(1) << end_bit) <= experts) ++end_bit;
  size_t temp_bytes = 0;
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys + 2 * stride, keys + stride,
                                                    keys + 3 * stride, static_cast<int>(n), 0, end_bit, s));
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes > 0 ? temp_bytes : 1)}, DType::U8, work.device());
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, keys, keys + 2 * stride,
                                                    keys + stride, keys + 3 * stride, static_cast<int>(n), 0, end_bit,
                                                    s));
}
}  // namespace

MoeRouting moe_routing(const Tensor& top_indices, const Tensor* keep, int64_t num_experts,
                       const MoeRoutingOptions& options) {
  const int64_t tokens = top_indices.size(0), k = top_indices.size(1), pairs = tokens * k;
  const Device dev = top_indices.device();
  cudaStream_t s = stream_of(top_indices);
  Tensor work = Tensor::empty({4, pairs > 0 ? pairs : 1}, DType::I32, dev);
  Tensor bounds = Tensor::zeros({num_experts + 2}, DType::I64, dev);  // starts[0..E], bad-id flag
  int64_t* starts = static_cast<int64_t*>(bounds.data_ptr());
  int32_t* keys = static_cast<int32_t*>(work.data_ptr());
  const int64_t stride = work.size(1);
  if (pairs > 0) {
    const uint8_t* kp = keep ? static_cast<const uint8_t*>(keep->data_ptr()) : nullptr;
    auto launch = [&](const auto* ids) {
      routing_keys_kernel<<<cuda_rt::grid_for(pairs, kBlock), kBlock, 0, s>>>(
          ids, kp, keys, keys + stride, pairs, num_experts, options.expert_start, options.num_experts_global,
          starts + num_experts + 1);
      STRATA_CUDA_LAUNCH_CHECK();
    };
    if (top_indices.dtype() == DType::I64) launch(static_cast<const int64_t*>(top_indices.data_ptr()));
    else launch(static_cast<const int32_t*>(top_indices.data_ptr()));
    sort_pairs(work, pairs, num_experts, s);
    routing_bounds_kernel<<<cuda_rt::grid_for(num_experts + 1, kBlock), kBlock, 0, s>>>(keys + 2 * stride, pairs,
                                                                                         num_experts, starts);
    STRATA_CUDA_LAUNCH_CHECK();
  }
  const Tensor host = bounds.to(Device::cpu());  // synchronizes the stream
  const int64_t* hb = host.data<int64_t>();
  if (hb[num_experts + 1] != 0) {  // error path: the CPU reference names the offending entry
    const Tensor keep_cpu = keep ? keep->to(Device::cpu()) : Tensor();
    cpu::moe_routing(top_indices.to(Device::cpu()), keep ? &keep_cpu : nullptr, num_experts, options);
    STRATA_THROW("moe_routing: an expert id is outside the valid range");
  }
  std::vector<int64_t> counts(num_experts);
  for (int64_t e = 0; e < num_experts; ++e) counts[e] = hb[e + 1] - hb[e];
  MoeRouting r;
  r.rows_per_expert = moe_rows_per_expert(counts, options.capacity);
  int64_t rows = 0;
  for (int64_t v : r.rows_per_expert) rows += v;
  r.row_map = Tensor::full({rows}, -1.0, DType::I64, dev);
  r.pair_rows = Tensor::full({tokens, k}, -1.0, DType::I64, dev);
  const int64_t kept = hb[num_experts];
  if (kept > 0) {
    routing_scatter_kernel<<<cuda_rt::grid_for(kept, kBlock), kBlock, 0, s>>>(
        keys + 2 * stride, keys + 3 * stride, starts, kept, k, options.capacity,
        static_cast<int64_t*>(r.row_map.data_ptr()), static_cast<int64_t*>(r.pair_rows.data_ptr()));
    STRATA_CUDA_LAUNCH_CHECK();
  }
  r.tokens_per_expert = Tensor::from_data(counts, {num_experts}, dev);
  return r;
}

void moe_gather_rows(const Tensor& src, const Tensor* row_map, const Tensor* scale, const Tensor& out,
                     const Tensor* dot_with, const Tensor* dscale) {
  const int64_t n = out.size(0), h = out.size(1);
  if (n == 0) return;
  cudaStream_t s = stream_of(out);
  const int64_t* map = row_map ? static_cast<const int64_t*>(row_map->data_ptr()) : nullptr;
  dispatch_float(out.dtype(), "moe_gather_rows", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    dispatch_weights(scale, [&](auto ptag) {
      using P = typename decltype(ptag)::type;
      const scalar_t* sp = static_cast<const scalar_t*>(src.data_ptr());
      scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
      if (dscale) {
        gather_rows_kernel<scalar_t, P, true><<<row_grid(n), kBlock, 0, s>>>(
            sp, src.size(0), map, weights_ptr<P>(scale), op, static_cast<const scalar_t*>(dot_with->data_ptr()),
            static_cast<P*>(dscale->data_ptr()), n, h);
      } else {
        gather_rows_kernel<scalar_t, P, false><<<row_grid(n), kBlock, 0, s>>>(
            sp, src.size(0), map, weights_ptr<P>(scale), op, nullptr, nullptr, n, h);
      }
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

void moe_combine_rows(const Tensor& src, const Tensor& pair_rows, const Tensor* weights, const Tensor& out) {
  const int64_t tokens = out.size(0), h = out.size(1), k = pair_rows.size(1);
  if (tokens == 0 || h == 0) return;
  STRATA_CHECK(k <= kMaxTopK, "moe_combine_rows: k = ", k, " exceeds the CUDA limit ", kMaxTopK);
  cudaStream_t s = stream_of(out);
  // Rounded up to an even number of rows: the compiler reads rows[] in 16-byte pairs, and
  // compute-sanitizer on the H200 caught that pair read past an odd k's allocation.
  const size_t shared = static_cast<size_t>((k + 1) / 2 * 2) * sizeof(int64_t);
  dispatch_float(out.dtype(), "moe_combine_rows", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    dispatch_weights(weights, [&](auto ptag) {
      using P = typename decltype(ptag)::type;
      combine_rows_kernel<scalar_t, P><<<row_grid(tokens), kBlock, shared, s>>>(
          static_cast<const scalar_t*>(src.data_ptr()), src.size(0), static_cast<const int64_t*>(pair_rows.data_ptr()),
          k, weights_ptr<P>(weights), static_cast<scalar_t*>(out.data_ptr()), tokens, h);
      STRATA_CUDA_LAUNCH_CHECK();
    });
  });
}

void moe_permute_probs_forward(const Tensor& probs, const Tensor& pair_rows, const Tensor& permuted_probs) {
  const int64_t n = permuted_probs.numel(), pairs = probs.numel();
  if (n == 0) return;
  cudaStream_t s = stream_of(probs);
  STRATA_CUDA_CHECK(cudaMemsetAsync(permuted_probs.data_ptr(), 0, permuted_probs.nbytes(), s));  // padding rows
  if (pairs == 0) return;
  dispatch_float(probs.dtype(), "moe_permute_probs_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    scatter_probs_kernel<scalar_t><<<cuda_rt::grid_for(pairs, kBlock), kBlock, 0, s>>>(
        static_cast<const scalar_t*>(probs.data_ptr()), static_cast<const int64_t*>(pair_rows.data_ptr()),
        static_cast<scalar_t*>(permuted_probs.data_ptr()), pairs, n);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

void moe_permute_probs_backward(const Tensor& dpermuted_probs, const Tensor& pair_rows, const Tensor& dprobs) {
  const int64_t pairs = dprobs.numel();
  if (pairs == 0) return;
  cudaStream_t s = stream_of(dprobs);
  dispatch_float(dprobs.dtype(), "moe_permute_probs_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    gather_probs_kernel<scalar_t><<<cuda_rt::grid_for(pairs, kBlock), kBlock, 0, s>>>(
        static_cast<const scalar_t*>(dpermuted_probs.data_ptr()), static_cast<const int64_t*>(pair_rows.data_ptr()),
        static_cast<scalar_t*>(dprobs.data_ptr()), pairs, dpermuted_probs.numel());
    STRATA_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace strata::kernels::cuda
