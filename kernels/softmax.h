// Row softmax over the last dimension, forward and backward, with an optional input scale and
// an optional causal (upper-triangular) mask for square [..., s, s] inputs.
// Reference: Megatron-Core FusedScaleMaskSoftmax / scaled_upper_triang_masked_softmax,
// llm.c softmax_forward (dev/cuda/softmax_forward.cu).
//
//   y[r, j] = exp(scale·x[r, j] - max) / Σ_k exp(scale·x[r, k] - max)   (masked entries: 0)
//   dx[r, j] = scale · y[r, j] · (dy[r, j] - Σ_k y[r, k]·dy[r, k])
// With causal, row r of a [..., s, s] input is query i = r mod s and entries j > i are masked
// (probability 0, gradient 0); no row is fully masked. Math in acc_t<T> (f32, f64 for f64).
// All tensors contiguous, same device and floating dtype; y may alias x, dx may alias dy.
#pragma once
#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

struct SoftmaxOptions {
  double scale = 1.0;   // softmax(scale·x)
  bool causal = false;  // mask j > i on square [..., s, s] inputs
};

// x: [..., c] -> y: [..., c]
void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxOptions& opt = {});
// y: [..., c], dy: [..., c] -> dx: [..., c]   (y is the forward output)
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, const SoftmaxOptions& opt = {});

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(softmax_forward)
STRATA_BACKEND_OP(softmax_backward)

}  // namespace strata::kernels
