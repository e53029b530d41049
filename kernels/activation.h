// Activation functions, forward and backward: GeLU (tanh approximation and exact erf), SiLU,
// SwiGLU. Reference: Megatron-Core (bias_gelu_impl, swiglu: silu(x_a) * x_b with the input's last
// dimension split in halves [a | b]), llm.c gelu_forward/gelu_backward.
// All tensors contiguous, same device and dtype; math in float (double for f64).
#pragma once
#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

enum class GeluApprox { Tanh, None };  // None = exact 0.5·x·(1+erf(x/√2))

// x: [n]  -> y: [n]
void gelu_forward(const Tensor& x, const Tensor& y, GeluApprox approx);
// x, dy: [n] -> dx: [n]   (dx may alias dy)
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, GeluApprox approx);

// y = x·sigmoid(x)
void silu_forward(const Tensor& x, const Tensor& y);
void silu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

// x: [..., 2f] = [a | b] -> y: [..., f] = silu(a)·b
void swiglu_forward(const Tensor& x, const Tensor& y);
// x: [..., 2f], dy: [..., f] -> dx: [..., 2f]
void swiglu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(gelu_forward)
STRATA_BACKEND_OP(gelu_backward)
STRATA_BACKEND_OP(silu_forward)
STRATA_BACKEND_OP(silu_backward)
STRATA_BACKEND_OP(swiglu_forward)
STRATA_BACKEND_OP(swiglu_backward)

}  // namespace strata::kernels
