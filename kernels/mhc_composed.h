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

namespace mhc_composed {
void mappings_forward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                      const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post, const Tensor& h_res_logits,
                      const Tensor& proj, const Tensor& rinv);
void mappings_backward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias, const Tensor& proj,
                       const Tensor& rinv, const MhcMappingOptions& o, const Tensor& g_pre, const Tensor& g_post,
                       const Tensor& g_res_logits, const Tensor& g_x, const Tensor& g_w, const Tensor& g_alpha,
                       const Tensor& g_bias);
void aggregate_forward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& out);
void aggregate_backward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& g_out, const Tensor& g_x,
                        const Tensor& g_h_pre);
void merge_forward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y, const Tensor& bias,
                   const Tensor& post_scale, bool keep_fp32, const Tensor& out);
void merge_backward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y, const Tensor& bias,
                    const Tensor& post_scale, bool keep_fp32, const Tensor& g_out, const Tensor& g_x,
                    const Tensor& g_h_res, const Tensor& g_h_post, const Tensor& g_y, const Tensor& g_bias);
}  // namespace mhc_composed

// The mapping / aggregation / merge ops one site calls: the fused ops of kernels/mhc.h
// (use_fused_mhc) or the composition above.
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
