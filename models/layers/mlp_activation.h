// The MLP activation (models/config/activation_config.h MlpActivation) on tensors: linear_fc1's
// output to linear_fc2's input, forward and backward, for the dense MLP, the shared experts and the
// routed experts; each kind maps onto one kernel of kernels/activation.h.
// Reference: Megatron-Core transformer/mlp.py (MLP.forward: glu() with the clamp and the offset, or
// activation_func), transformer/moe/experts.py (TEGroupedMLP bias_act_func).
#pragma once
#include "core/tensor.h"
#include "kernels/activation.h"
#include "models/config/activation_config.h"

namespace strata::layers {

// The gated kinds' kernel options (gate function, offset, clamp); a gated activation only.
kernels::GluOptions glu_options(const MlpActivation& a);
// fc1_out: [..., a.fc1_width(f)] -> out: [..., f]
void mlp_activation_forward(const MlpActivation& a, const Tensor& fc1_out, const Tensor& out);
// fc1_out: [..., a.fc1_width(f)], dout: [..., f] -> dfc1: fc1_out's shape
void mlp_activation_backward(const MlpActivation& a, const Tensor& fc1_out, const Tensor& dout, const Tensor& dfc1);

}  // namespace strata::layers
