// Token embedding lookup and its weight gradient, with Megatron-Core VocabParallelEmbedding
// semantics so the same kernels serve tensor parallelism: each rank holds rows
// [vocab_start, vocab_start + v_local) of the global table, ids outside that range produce zero
// rows (the caller all-reduces the partial outputs over the TP group), and the backward pass only
// touches local rows. Reference: Megatron-Core tensor_parallel/layers.py (VocabParallelEmbedding),
// llm.c encoder_forward / encoder_backward (deterministic variant: sort by id, sum in order).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

// ids: [n] (i64 or i32), weight: [v_local, h] (f64/f32/bf16/f16) holding rows
// vocab_start .. vocab_start+v_local-1 of the global table, out: [n, h] (weight's dtype).
// out[i] = weight[ids[i] - vocab_start] when that row is local, else zeros.
// Ids outside [0, vocab_size_global) are a user error when checked: pass vocab_size_global > 0
// to check. The CPU backend always rejects negative ids (and ids >= vocab_size_global when it is
// given); the CUDA backend checks only when vocab_size_global > 0, through a device flag that is
// copied back (this synchronizes the stream), so leave it 0 in the hot path.
void embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, int64_t vocab_start = 0,
                       int64_t vocab_size_global = 0);

// ids: [n], dout: [n, h] -> dweight: [v_local, h]; dweight[r] (+)= Σ dout[i] over positions i with
// ids[i] == vocab_start + r, summed in position order in f32 (f64 for f64). accumulate = false
// overwrites dweight (rows with no occurrence become zero); accumulate = true adds to it.
// Deterministic on both backends (no atomics): the CUDA path stable-sorts (id, position) pairs.
// Non-local ids contribute nothing; negative ids are rejected on the CPU and skipped on CUDA.
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dweight, bool accumulate,
                        int64_t vocab_start = 0);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(embedding_forward)
STRATA_BACKEND_OP(embedding_backward)

}  // namespace strata::kernels
