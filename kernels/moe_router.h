// The MoE router's score function and top-k selection as a kernel pair, forward and backward
// (Megatron-Core moe_utils.topk_routing_with_score_function without group limits; the host
// reference with every router option is models/layers/moe/routing.cpp, which this matches):
//   softmax, post (default):  idx = top-k of the logits;              p = softmax(logits[idx])
//   softmax, pre_softmax:     s = softmax(logits); idx = top-k of s;  p = s[idx]
//   sigmoid / sqrtsoftplus:   s = σ(l) or sqrt(softplus(l)) (softplus(l) = l above 20, torch's
//                             threshold); idx = top-k of s + expert_bias (the bias selects only);
//                             p = s[idx], divided by Σ p + 1e-20 when k > 1
//   then p *= scaling_factor.
// top_indices are in descending selection score; equal scores select the LOWER expert id first
// (the rule of routing.cpp; torch.topk leaves ties open). NaN scores are never selected.
// Math in f32 (f64 for f64 logits), probabilities rounded once to the logits' dtype.
// Backward: d(logits) from d(top_probs), recomputing the scores from the logits (no saved state).
// CPU reference in kernels/cpu/moe_router.cpp; CUDA (one warp per token) in kernels/cuda/moe_router.cu.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

enum class RouterScore { Softmax, Sigmoid, SqrtSoftplus };

struct MoeRouterTopkOptions {
  RouterScore score = RouterScore::Softmax;
  bool pre_softmax = false;     // softmax only
  int64_t topk = 2;             // 1 <= topk <= E (CUDA: <= 64); post-softmax top-1 is allowed here
  double scaling_factor = 1.0;  // moe_router_topk_scaling_factor (unset: 1)
};

// logits: [T, E] f64/f32/bf16/f16; expert_bias: [E] f32 or null (sigmoid / sqrtsoftplus only)
//   -> top_probs: [T, k] (logits' dtype), top_indices: [T, k] i64.
void moe_router_topk_forward(const Tensor& logits, const Tensor* expert_bias, const MoeRouterTopkOptions& options,
                             const Tensor& top_probs, const Tensor& top_indices);
// logits: [T, E], top_indices: [T, k] i64 (the forward's), dtop_probs: [T, k] (logits' dtype)
//   -> dlogits: [T, E] (logits' dtype; zero where no selected probability depends on the logit).
void moe_router_topk_backward(const Tensor& logits, const Tensor& top_indices, const Tensor& dtop_probs,
                              const MoeRouterTopkOptions& options, const Tensor& dlogits);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(moe_router_topk_forward)
STRATA_BACKEND_OP(moe_router_topk_backward)

}  // namespace strata::kernels
