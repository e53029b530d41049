// The backend step of clip_grad_norm (kernels/optimizer.h): each gradient multiplied by `factor` in
// place (in float; double for f64 grads). Not an op: kernels/optimizer.cpp checks the arguments and
// dispatches. Private to kernels/: the signature is written once, as a function type.
// Reference: megatron/core/optimizer/clip_grads.py (clip_grad_by_total_norm_fp32).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace strata::kernels {

using ScaleGrads = void(const std::vector<Tensor>& grads, double factor);
namespace cpu {
ScaleGrads scale_grads;
}  // namespace cpu
namespace cuda {
ScaleGrads scale_grads;
}  // namespace cuda

}  // namespace strata::kernels
