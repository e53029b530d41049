// The unfused mHC path (`model.use_fused_mhc: false`, the default): the mapping computation, the
// aggregation and the merge of kernels/mhc.h composed from generic kernels (batched GEMMs of
// kernels/gemm.h, elementwise ops, the gate op mhc_compute_h) with the same signatures and dtype
// contracts as the fused ops; a site names both and calls one (mhc_call).
// Reference: Megatron-LM dev megatron/core/transformer/hyper_connection.py (native_proj_rms,
// _compute_h, native_h_aggregate, native_h_post_bda, _fused_h_res_h_post_bda_native).
// Details (each op of both paths, numerics): docs/mhc.md, "Kernels".
#pragma once
#include <utility>

#include "kernels/mhc.h"

namespace strata::kernels {

// The mapping / aggregation / merge ops one site calls: the fused ops of kernels/mhc.h
// (use_fused_mhc) or the composition (kernels/mhc_composed.cpp, namespace mhc_composed), each with
// the signature of its fused op. The composition, as Megatron dev's native path: mappings = an f32
// GEMM x_f32 · Wᵀ, Σx² per row (a batched GEMM x·xᵀ) and the gate op; aggregate = one batched GEMM
// h_pre[T, 1, n] · x[T, n, C]; merge = H_resᵀ·x (batched GEMM) + h_post ⊗ (y + bias) (a k = 1
// batched GEMM), the dropout scale (in f32, rounded once) and the sum. Its mappings' backward
// recomputes Σx² (one small GEMM) instead of inverting the saved rinv. With
// mhc_keep_mappings_in_fp32 and 16-bit activations every product runs on f32 copies; otherwise the
// mappings are cast to the activation dtype and each GEMM rounds its output once (the merge rounds
// its two terms and their sum separately, as Megatron's bf16 bmm and adds; the fused merge once),
// and the mapping gradients are rounded to the activation dtype, as in the fused ops. Gradients of
// x accumulate into an f32 (f64) g_x. Sinkhorn and the contraction are single ops in both paths.
namespace mhc_composed {
STRATA_MHC_COMPOSED_OPS(STRATA_DECLARE_LIKE_OP)
}  // namespace mhc_composed

// Calls the fused op (use_fused_mhc) or its composition, which share one signature:
//   mhc_call(fused, mhc_merge_forward, mhc_composed::mhc_merge_forward, x, h_res, …).
template <typename Op, typename... Args>
void mhc_call(bool fused, Op& fused_op, Op& composed_op, Args&&... args) {
  (fused ? fused_op : composed_op)(std::forward<Args>(args)...);
}

}  // namespace strata::kernels
