// Deterministic reductions: sum, max, sum of squares, count of zeros over a whole tensor, and
// sum over the last dimension. The scalar results feed Megatron-Core's training metrics (grad norm
// = sqrt(sum_of_squares), `num-zeros` of gradients, loss sums) and stay on the input's device so
// that no host synchronisation is forced. Reference: Megatron-Core clip_grads
// (get_grad_norm_fp32, count_zeros_fp32), llm.c global_norm_squared (fixed grid + second pass).
//
// Determinism: every result is produced by a fixed reduction tree that depends only on the shape,
// never on the thread count or launch timing, and no atomics are used.
//   CPU:  the range is cut into chunks of kReduceChunk elements (a count fixed by n), each chunk is
//         reduced in order into 8 interleaved lanes, then lanes and chunk partials are combined
//         pairwise in a fixed order.
//   CUDA: a fixed grid (min(ceil(n/256), 1024) blocks of 256 threads, a function of n only), a
//         shuffle tree inside each block, per-block partials in a temporary buffer, then one
//         block combining the partials in a fixed order.
// Precision: accumulation in f32 for f32/bf16/f16 input, f64 when the input or the output is f64.
// Sequential runs are short (128 elements per CPU lane; n/262144 per CUDA thread) and the rest is
// a tree, so the error grows roughly like sqrt(run)·eps + log2(n)·eps rather than n·eps. sum_of_squares of f32 gradients therefore accumulates in f32, like Megatron's fused l2norm.
// count_zeros counts in 64-bit integers and is exact (converted to the output dtype at the end).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

// Elements per chunk of the CPU reduction tree.
inline constexpr int64_t kReduceChunk = 1024;

// x: [...] -> out: [1] (f32 or f64). Sum of all elements; 0 for an empty tensor.
void sum(const Tensor& x, const Tensor& out);
// x: [...] -> out: [1] (f32 or f64). Largest element; NaN if any element is NaN; -inf if empty.
void max(const Tensor& x, const Tensor& out);
// x: [...] -> out: [1] (f32 or f64). Sum of x²; 0 for an empty tensor.
void sum_of_squares(const Tensor& x, const Tensor& out);
// x: [...] -> out: [1] (f32, f64 or i64). Number of elements equal to 0 (±0; NaN is not zero).
void count_zeros(const Tensor& x, const Tensor& out);
// x: [r, c] (any leading dims, last dim c) -> out: [r] (r = x.numel() / c elements, any float
// dtype) = sum over the last dimension. Rows of length 0 give 0.
void sum_rows(const Tensor& x, const Tensor& out);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(sum)
STRATA_BACKEND_OP(max)
STRATA_BACKEND_OP(sum_of_squares)
STRATA_BACKEND_OP(count_zeros)
STRATA_BACKEND_OP(sum_rows)

}  // namespace strata::kernels
