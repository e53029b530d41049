// The unfused mHC path (`model.use_fused_mhc: false`, the default): the mapping computation, the
// aggregation and the merge of kernels/mhc.h composed from generic kernels — batched GEMMs
// (kernels/gemm.h: cuBLASLt on CUDA, OpenBLAS on the CPU), elementwise ops and the gate op
// mhc_compute_h — with the same signatures and dtype contracts as the fused ops, so a site calls
// either set through one table (MhcOps). This mirrors Megatron dev's native path:
//   mappings  = proj = x_f32 · Wᵀ (an f32 GEMM), Σx² per row (a batched GEMM x·xᵀ), the gate op
//               (native_proj_rms + _compute_h);
//   aggregate = one batched GEMM h_pre[T, 1, n] · x[T, n, C] (native_h_aggregate);
//   merge     = H_resᵀ·x (batched GEMM) + h_post ⊗ (y + bias) (a k = 1 batched GEMM), then the
//               dropout scale (applied in f32 and rounded once, as PyTorch's dropout) and the sum
//               (native_h_post_bda + the unfused bias-dropout-add).
// The mappings' backward recomputes Σx² (one small GEMM) instead of inverting the saved rinv.
// The Sinkhorn projection and the contraction are single ops in both paths (Megatron's native
// Sinkhorn is one autograd function as well). Working dtype: with mhc_keep_mappings_in_fp32 and
// 16-bit activations every product runs on f32 copies (x, y upcast); otherwise the mappings are
// cast to the activation dtype and each GEMM accumulates in f32 and rounds its output once, so the
// merge rounds H_resᵀ·x, h_post ⊗ (y + bias) and their sum separately (as Megatron's bf16 bmm and
// adds), where the fused merge rounds once. Mapping gradients are rounded to the activation dtype
// in that mode, as in the fused ops. Gradients of x accumulate into an f32 (f64) g_x.
// Reference: Megatron-LM dev megatron/core/transformer/hyper_connection.py (native_proj_rms,
// _compute_h, native_h_aggregate, native_h_post_bda, _fused_h_res_h_post_bda_native).
#pragma once
#include "kernels/mhc.h"

namespace strata::kernels {

// The mapping / aggregation / merge ops one site calls: the fused ops of kernels/mhc.h
// (use_fused_mhc) or the composition above (kernels/mhc_composed.cpp, namespace mhc_composed),
// each with the signature of its fused op.
struct MhcOps {
  decltype(&mhc_mappings_forward) mappings_forward;
  decltype(&mhc_mappings_backward) mappings_backward;
  decltype(&mhc_aggregate_forward) aggregate_forward;
  decltype(&mhc_aggregate_backward) aggregate_backward;
  decltype(&mhc_merge_forward) merge_forward;
  decltype(&mhc_merge_backward) merge_backward;
};
const MhcOps& mhc_ops(bool fused);

}  // namespace strata::kernels
