// The MLP activation on tensors (see mlp_activation.h).
#include "models/layers/mlp_activation.h"

#include "core/error.h"

namespace strata::layers {

kernels::GluOptions glu_options(const MlpActivation& a) {
  STRATA_INTERNAL_ASSERT(a.gated, "glu_options: ", to_string(a.kind), " is not a gated activation");
  kernels::GluOptions o;
  o.gate = a.kind == MlpActivationKind::QuickGeglu ? kernels::GluGate::QuickGelu : kernels::GluGate::Silu;
  o.linear_offset = a.linear_offset;
  o.clamp = a.clamp;
  return o;
}

void mlp_activation_forward(const MlpActivation& a, const Tensor& fc1_out, const Tensor& out) {
  switch (a.kind) {
    case MlpActivationKind::GeluErf: kernels::gelu_forward(fc1_out, out, kernels::GeluApprox::None); return;
    case MlpActivationKind::GeluTanh: kernels::gelu_forward(fc1_out, out, kernels::GeluApprox::Tanh); return;
    case MlpActivationKind::Swiglu:
    case MlpActivationKind::QuickGeglu: kernels::glu_forward(fc1_out, out, glu_options(a)); return;
    case MlpActivationKind::SquaredRelu: kernels::squared_relu_forward(fc1_out, out); return;
  }
  STRATA_INTERNAL_ASSERT(false, "mlp_activation_forward: unknown activation");
}

void mlp_activation_backward(const MlpActivation& a, const Tensor& fc1_out, const Tensor& dout, const Tensor& dfc1) {
  switch (a.kind) {
    case MlpActivationKind::GeluErf: kernels::gelu_backward(fc1_out, dout, dfc1, kernels::GeluApprox::None); return;
    case MlpActivationKind::GeluTanh: kernels::gelu_backward(fc1_out, dout, dfc1, kernels::GeluApprox::Tanh); return;
    case MlpActivationKind::Swiglu:
    case MlpActivationKind::QuickGeglu: kernels::glu_backward(fc1_out, dout, dfc1, glu_options(a)); return;
    case MlpActivationKind::SquaredRelu: kernels::squared_relu_backward(fc1_out, dout, dfc1); return;
  }
  STRATA_INTERNAL_ASSERT(false, "mlp_activation_backward: unknown activation");
}

}  // namespace strata::layers
