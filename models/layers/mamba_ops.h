// The Mamba2 mixer's small elementwise steps around the SSD scan, forward and backward:
// dt = softplus(dt_raw + dt_bias), A = −exp(A_log), and the gated grouped RMSNorm
// (norm_before_gate = False: g = y·SiLU(z), then RMSNorm over each group of d_inner/G channels,
// eps, times the per-channel weight). Computed on the host in f64 and written back in the inputs'
// dtype and device (correct on every device, not fast: a fused kernel is a later step).
// Reference: Megatron-Core ssm/mamba_mixer.py (dt_bias, A_log, RMSNormGated from
// mamba_ssm.ops.triton.layernorm_gated with group_size = d_inner_local / ngroups_local).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace strata::layers::mamba_ops {

// dt_raw: [b, s, H], dt_bias: [H] -> dt [b, s, H] (dt_raw's dtype).
Tensor softplus_dt(const Tensor& dt_raw, const Tensor& dt_bias);
// ddt -> d(dt_raw) [b, s, H] (returned) and d(dt_bias) [H] (f64, returned through out param).
Tensor softplus_dt_backward(const Tensor& dt_raw, const Tensor& dt_bias, const Tensor& ddt, Tensor* d_bias);

// A = −exp(A_log) in A_log's dtype; dA_log = dA·A.
Tensor neg_exp(const Tensor& a_log);
Tensor neg_exp_backward(const Tensor& a, const Tensor& da);

// y, z: [b, s, C], weight: [C], groups G (C % G == 0) -> out [b, s, C] (y's dtype).
Tensor gated_group_rmsnorm(const Tensor& y, const Tensor& z, const Tensor& weight, int64_t groups, double eps);
struct GatedNormGrads {
  Tensor dy, dz;  // [b, s, C] in y's dtype
  Tensor dweight;  // [C] f64
};
GatedNormGrads gated_group_rmsnorm_backward(const Tensor& y, const Tensor& z, const Tensor& weight, int64_t groups,
                                            double eps, const Tensor& dout);

}  // namespace strata::layers::mamba_ops
