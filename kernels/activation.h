// Activation functions, forward and backward: GeLU (tanh approximation and exact erf), SiLU, the
// gated linear unit with a SiLU (SwiGLU) or quick-GeLU (quick-GeGLU) gate, an offset on its linear
// half and an optional clamp (gpt-oss), squared ReLU (Nemotron) and squared ReLU weighted per row
// (the experts' fused form, the routing probability multiplied inside the activation).
// Reference: Megatron-Core transformer/mlp.py (MLP.forward: glu() with activation_func_clamp_value
// and glu_linear_offset), fusions/fused_bias_swiglu.py (clamped_swiglu, clamped_swiglu_back),
// fusions/fused_bias_geglu.py (quick_gelu: x·σ(1.702x), quick_geglu, quick_geglu_back),
// activations.py (squared_relu), fusions/fused_weighted_squared_relu.py (weighted_squared_relu,
// weighted_squared_relu_back); llm.c gelu_forward/gelu_backward.
// All tensors contiguous, same device and dtype (the row weights f32 or f64); math in float
// (double for f64, or for f64 weights).
#pragma once
#include <optional>

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

// The gate function of a gated linear unit: SiLU x·σ(x) (SwiGLU) or quick-GeLU x·σ(1.702·x)
// (quick-GeGLU, Megatron's quick_gelu).
enum class GluGate { Silu, QuickGelu };
struct GluOptions {
  GluGate gate = GluGate::Silu;
  double linear_offset = 0.0;   // added to the linear half (Megatron's glu_linear_offset)
  std::optional<double> clamp;  // c > 0: the gate half clamped to ≤ c, the linear half to [-c, c]
};
// x: [..., 2f] = [a | b] -> y: [..., f] = gate(a')·(b' + offset), where a' = min(a, c) and
// b' = clamp(b, -c, c) with a clamp c (else a' = a, b' = b). Defaults: SwiGLU, silu(a)·b.
void glu_forward(const Tensor& x, const Tensor& y, const GluOptions& options = {});
// x: [..., 2f], dy: [..., f] -> dx: [..., 2f]; where an input was clamped its gradient is 0
// (torch.clamp's backward: it passes where a <= c, and where -c <= b <= c).
void glu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const GluOptions& options = {});

// y = relu(x)² (Megatron's squared_relu)
void squared_relu_forward(const Tensor& x, const Tensor& y);
// dx = dy·2·relu(x)   (dx may alias dy)
void squared_relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx);

// x: [N, F], weights: [N] f32/f64 -> y: [N, F] = relu(x)²·weights[r] (x's dtype), rounded once.
void weighted_squared_relu_forward(const Tensor& x, const Tensor& weights, const Tensor& y);
// x, dy: [N, F], weights: [N] -> dx: [N, F] = dy·weights[r]·2·relu(x) (may alias dy),
//   dweights: [N] (weights' dtype) = Σ_j relu(x[r, j])²·dy[r, j].
void weighted_squared_relu_backward(const Tensor& x, const Tensor& weights, const Tensor& dy, const Tensor& dx,
                                    const Tensor& dweights);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(gelu_forward)
STRATA_BACKEND_OP(gelu_backward)
STRATA_BACKEND_OP(silu_forward)
STRATA_BACKEND_OP(silu_backward)
STRATA_BACKEND_OP(glu_forward)
STRATA_BACKEND_OP(glu_backward)
STRATA_BACKEND_OP(squared_relu_forward)
STRATA_BACKEND_OP(squared_relu_backward)
STRATA_BACKEND_OP(weighted_squared_relu_forward)
STRATA_BACKEND_OP(weighted_squared_relu_backward)

}  // namespace strata::kernels
