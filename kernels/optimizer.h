// Optimizer kernels: AdamW step on f32 master weights, gradient sum of squares (the local part of
// the global grad norm), grad-norm clipping and a non-finite check.
// Reference: PyTorch torch.optim.AdamW / apex FusedAdam (adam_w_mode), Megatron-Core
// optimizer/clip_grads.py (get_grad_norm_fp32, clip_grad_by_total_norm_fp32), llm.c adamw_kernel3.
// Deterministic: the sum of squares uses fixed chunking on the CPU and a fixed-grid two-pass
// reduction on CUDA (no atomics), accumulated in double.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

struct AdamWConfig {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// One AdamW step for one parameter tensor, in place. step is 1-based (bias correction):
//   g = grad_scale · grad
//   param ← param − lr · weight_decay_mult · weight_decay · param        (decoupled decay)
//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   param ← param − lr · m̂ / (sqrt(v̂) + eps),  m̂ = m/(1−β1^step), v̂ = v/(1−β2^step)
// weight_decay_mult is 0 for biases and 1-d params (the caller decides); grad_scale folds in the
// clip coefficient. model_param, when given, receives the updated master value in its dtype.
// param, grad, exp_avg, exp_avg_sq: [n] contiguous, same dtype (f32; f64 for reference runs)
// model_param: [n] contiguous, any float dtype (bf16/f16 low-precision copy of the master)
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWConfig& cfg, int64_t step, double weight_decay_mult = 1.0,
                double grad_scale = 1.0, const Tensor* model_param = nullptr);

// out ← Σ over tensors of Σ g², in a fixed order (deterministic), accumulated in double.
// grads: each [*] contiguous, any float dtype, on out's device
// out: [1] (any shape with one element), f32 or f64
void grad_sum_of_squares(const std::vector<Tensor>& grads, const Tensor& out);

// Megatron clip_grad_norm_fp32 (local; no all-reduce): total_norm = sqrt(Σ g²);
// clip_coeff = max_norm / (total_norm + 1e-6); if clip_coeff < 1 every grad is multiplied by
// clip_coeff (in float; double for f64 grads). Returns total_norm (one host sync).
// grads: each [*] contiguous, any float dtype, all on one device
double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm);

// True if any element of t is NaN or ±Inf (one host sync).
// t: [*] contiguous, any float dtype
bool has_non_finite(const Tensor& t);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(adamw_step)
STRATA_BACKEND_OP(grad_sum_of_squares)
STRATA_BACKEND_OP(has_non_finite)

}  // namespace strata::kernels
