// LayerNorm and RMSNorm over the last dimension, forward and backward.
// Reference: Megatron-Core / Transformer Engine (FusedLayerNorm, RMSNorm, apply_layernorm_1p =
// zero_centered_gamma), llm.c layernorm_forward/layernorm_backward.
//
//   LayerNorm: mean = Σx/h, rstd = 1/sqrt(Σ(x-mean)²/h + eps), y = (x-mean)·rstd·g + beta
//   RMSNorm:   rstd = 1/sqrt(Σx²/h + eps),                     y = x·rstd·g
// with g = gamma, or g = 1 + gamma when zero_centered_gamma (gamma stored centred on 0).
//
// Dtypes: x, y, dy, dx, gamma, beta share one floating dtype. The saved statistics mean and rstd
// are f32 (the accumulation type) for f32/bf16/f16 inputs and f64 for f64 inputs (the reference).
// dgamma and dbeta are gamma's dtype or f32 (e.g. Megatron's f32 main_grad); with `accumulate`
// the gradients are added to their current contents, otherwise they are overwritten.
// dgamma/dbeta are deterministic: partial sums over fixed row chunks (the chunking depends only
// on n), reduced in a fixed order; no atomics. All tensors contiguous and on one device;
// x may have any leading shape [..., h], flattened to n rows. dx must not alias dy or x.
#pragma once
#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

struct NormOptions {
  double eps = 1e-5;
  bool zero_centered_gamma = false;  // Megatron apply_layernorm_1p: use (1 + gamma)
};

// x: [n, h], gamma: [h], beta: [h] -> y: [n, h], mean: [n], rstd: [n]
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, const NormOptions& opt = {});
// dy: [n, h], x: [n, h], gamma: [h], mean: [n], rstd: [n] -> dx: [n, h], dgamma: [h], dbeta: [h]
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const NormOptions& opt = {}, bool accumulate = false);

// x: [n, h], gamma: [h] -> y: [n, h], rstd: [n]
void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd,
                     const NormOptions& opt = {});
// dy: [n, h], x: [n, h], gamma: [h], rstd: [n] -> dx: [n, h], dgamma: [h]
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dgamma, const NormOptions& opt = {},
                      bool accumulate = false);

// Number of rows each deterministic dgamma/dbeta chunk sums (both backends): depends only on n,
// at least 32 rows and at most 1024 chunks in all.
int64_t norm_rows_per_chunk(int64_t n);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(layernorm_forward)
STRATA_BACKEND_OP(layernorm_backward)
STRATA_BACKEND_OP(rmsnorm_forward)
STRATA_BACKEND_OP(rmsnorm_backward)

}  // namespace strata::kernels
