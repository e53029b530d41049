// Causal depthwise conv1d with bias, then SiLU: the convolution before the Mamba2 mixer's scan
// (d_conv = 4), forward and backward, with a carried history for generation.
//   y[b,t,c] = silu(bias[c] + Σ_k w[c,k]·x[b, t−(K−1)+k, c]),  positions < 0 read `history`.
// x, y, dy, dx: channels-last [b, l, C] in one float dtype; w: [C, K], bias: [C] (same dtype as
// x); history [b, C, K−1]: the K−1 inputs before position 0 (undefined: zeros); final_history
// [b, C, K−1]: the last K−1 inputs (reading the history when l < K−1), for the next call.
// Math in f64 for f64 x, else f32.
// Reference: Megatron-Core ssm/mamba_mixer.py (conv1d = nn.Conv1d(groups=conv_dim,
// padding=d_conv−1) then SiLU; causal_conv1d_fn / causal_conv1d_update with conv_state).
#pragma once
#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

void causal_conv1d_silu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& history,
                                const Tensor& y, const Tensor& final_history);
// dx written; dw [C, K] and dbias [C] accumulated into (any float dtype, e.g. f32 main grads).
void causal_conv1d_silu_backward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy,
                                 const Tensor& dx, const Tensor& dw, const Tensor& dbias);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(causal_conv1d_silu_forward)
STRATA_BACKEND_OP(causal_conv1d_silu_backward)

}  // namespace strata::kernels
