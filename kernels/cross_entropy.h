// Cross-entropy loss fused with the softmax over the vocabulary, in the stages of Megatron-Core's
// fused vocab-parallel cross entropy so tensor parallelism can combine per-shard statistics:
//   stage 1  row_max   = max_j logits            -> caller all-reduces with MAX over the TP group
//   stage 2  sum_exp   = Σ_j exp(logit - row_max), target_logit = logit[target] (0 if not local)
//                                                -> caller all-reduces both with SUM
//   stage 3  loss      = log(sum_exp) + row_max - target_logit
// Each rank holds columns [vocab_start, vocab_start + v_local) of the global vocabulary; targets are
// global ids. Targets < 0 (ignore index, e.g. -100) give loss 0 and zero gradient: stage 2 writes
// sum_exp = 0 and target_logit = 0 for them on every rank (a real row always has sum_exp >= 1 after
// the all-reduce), and stage 3 maps sum_exp == 0 to loss 0.
// Statistics (row_max, sum_exp, target_logit, loss, dloss) are f32, or f64 when logits are f64.
// Reference: Megatron-Core tensor_parallel/cross_entropy.py (VocabParallelCrossEntropy),
// llm.c fused_classifier.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

// logits: [n, v_local] (f64/f32/bf16/f16) -> row_max: [n]
void cross_entropy_max(const Tensor& logits, const Tensor& row_max);
// logits: [n, v_local], targets: [n] i64 global ids, row_max: [n] -> sum_exp: [n], target_logit: [n]
void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                           const Tensor& sum_exp, const Tensor& target_logit, int64_t vocab_start = 0);
// row_max, sum_exp, target_logit: [n] -> loss: [n]  (loss may alias any input)
void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        const Tensor& loss);
// All three stages for a single shard: logits: [n, v_local], targets: [n] -> loss: [n], and the
// statistics the backward pass needs, row_max: [n] and sum_exp: [n].
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& loss,
                           const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start = 0);
// logits: [n, v_local], targets: [n], row_max: [n], sum_exp: [n] (global, after the all-reduces),
// dloss: [n] (the caller folds in the loss mask and 1/num_tokens) -> dlogits: [n, v_local]
//   dlogits = (softmax - (1 - s)·onehot(target) - s / K) · dloss,   s = label_smoothing·K / (K - 1)
// (Megatron's label smoothing; s = 0 by default). K is the global vocabulary size:
// vocab_size_global, or v_local when it is 0 (single shard). dlogits may alias logits (in place).
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                            const Tensor& sum_exp, const Tensor& dloss, const Tensor& dlogits,
                            int64_t vocab_start = 0, double label_smoothing = 0.0,
                            int64_t vocab_size_global = 0);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(cross_entropy_max)
STRATA_BACKEND_OP(cross_entropy_sum_exp)
STRATA_BACKEND_OP(cross_entropy_loss)
STRATA_BACKEND_OP(cross_entropy_forward)
STRATA_BACKEND_OP(cross_entropy_backward)

}  // namespace strata::kernels
