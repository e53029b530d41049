// mHC (manifold-constrained hyper-connections) ops, forward and backward: the per-site mapping
// computation (projection + RMS scaling + gates), the Sinkhorn-Knopp projection of the residual
// mixing logits, the stream aggregation, the merge H_resᵀ·x + h_post ⊗ (y + bias), the learned
// output contraction and the stream sum / broadcast (mean contraction, input expansion).
// Notation: T tokens (s·b flattened), n streams, C hidden, K = n·C, m = n² + 2n. An n-stream tensor
// [T, n·C] is stream-major within a token (stream j = columns j·C .. (j+1)·C). Mapping rows are
// [pre (n) | post (n) | res (n², row-major i·n + j)].
// Dtypes: activations x, y, out in one float dtype ("act"); parameters and the mappings (h_pre,
// h_post, h_res, their gradients) in f32 — f64 when the activations are f64 (the reference). All
// math accumulates in f32 (f64 for f64 activations). Gradients of x are ACCUMULATED into g_x (any
// float dtype: a site's three consumers of x add into one f32 buffer, cast once), parameter
// gradients accumulated into their main grads, everything else written.
// keep_fp32 (model.mhc_keep_mappings_in_fp32): true applies the f32 mappings as they are; false
// rounds h_pre / h_post / h_res to the activation dtype before they are applied, and rounds their
// gradients to it as well (Megatron dev: mappings cast to bf16, products of bf16 tensors). Either way
// the products and sums run in f32 and the output is rounded once. docs/mhc.md has the formulas.
// Reference: Megatron-LM dev megatron/core/transformer/hyper_connection.py (native_proj_rms,
// _compute_h, _sinkhorn_iterations, native_h_aggregate, native_h_post_bda, learned_output_contract,
// input_expand, output_contract), fusions/fused_mhc_kernels.py.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

inline constexpr double kMhcNormEps = 1e-6;      // the mapping norm's eps outside the sqrt
inline constexpr double kMhcSinkhornEps = 1e-6;  // every Sinkhorn denominator, and the softmax + eps
inline constexpr double kMhcPreEps = 1e-6;       // h_pre = σ(·) + eps

struct MhcMappingOptions {
  int64_t n = 4;                      // streams
  bool norm_eps_inside_sqrt = false;  // false: 1/(‖x‖/√K + eps); true: rsqrt(Σx²/K + eps)
  double norm_eps = kMhcNormEps;      // 1e-6 outside; layernorm_epsilon inside (the caller's choice)
};

// x [T, K] act; w [m, K]; alpha [3] = (α_pre, α_post, α_res); bias [m] (w, alpha, bias f32/f64).
// h = proj·α·rinv + bias with proj = x·wᵀ [T, m], rinv [T] the norm factor; outputs:
// h_pre [T, n] = σ(h_pre)+1e-6, h_post [T, n] = 2σ(h_post), h_res_logits [T, n, n] = h_res,
// proj [T, m] and rinv [T] (saved for the backward). Outputs f32 (f64 for f64 x).
void mhc_mappings_forward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                          const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                          const Tensor& h_res_logits, const Tensor& proj, const Tensor& rinv);
// g_pre [T, n], g_post [T, n], g_res_logits [T, n, n] → g_x [T, K] (accumulated), g_w [m, K],
// g_alpha [3], g_bias [m] (accumulated).
void mhc_mappings_backward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                           const Tensor& proj, const Tensor& rinv, const MhcMappingOptions& o, const Tensor& g_pre,
                           const Tensor& g_post, const Tensor& g_res_logits, const Tensor& g_x, const Tensor& g_w,
                           const Tensor& g_alpha, const Tensor& g_bias);

// The gate op of the unfused mapping computation (kernels/mhc_composed.h: a projection GEMM, the
// row sums of squares, then this; Megatron dev native_proj_rms + _compute_h). proj [T, m] and
// sumsq [T] = Σ_c x² over K columns (f32, f64 for an f64 model), alpha [3], bias [m] → h_pre,
// h_post [T, n], h_res_logits [T, n, n] and rinv [T], as mhc_mappings_forward.
void mhc_compute_h_forward(const Tensor& proj, const Tensor& sumsq, const Tensor& alpha, const Tensor& bias,
                           int64_t K, const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                           const Tensor& h_res_logits, const Tensor& rinv);
// g_pre, g_post [T, n], g_res_logits [T, n, n] → g_proj [T, m] and g_sumsq [T] (written), g_alpha [3]
// and g_bias [m] (accumulated, summed over tokens in order).
void mhc_compute_h_backward(const Tensor& proj, const Tensor& sumsq, const Tensor& alpha, const Tensor& bias,
                            int64_t K, const MhcMappingOptions& o, const Tensor& g_pre, const Tensor& g_post,
                            const Tensor& g_res_logits, const Tensor& g_proj, const Tensor& g_sumsq,
                            const Tensor& g_alpha, const Tensor& g_bias);

// logits [T, n, n] → out [T, n, n]: M = softmax_row(L) + eps; M /= colsum + eps; then (iterations−1)
// × (M /= rowsum + eps; M /= colsum + eps). iterations ≥ 1. f32 or f64.
void mhc_sinkhorn_forward(const Tensor& logits, int64_t iterations, double eps, const Tensor& out);
// The exact gradient of the unrolled iterations: recomputed from the logits per matrix (the
// 2·iterations intermediate matrices live only inside the backward), g_logits [T, n, n] written.
void mhc_sinkhorn_backward(const Tensor& logits, int64_t iterations, double eps, const Tensor& g_out,
                           const Tensor& g_logits);

// x [T, n·C] act, h_pre [T, n] → out [T, C] act: out = Σ_i h_pre[i]·x_i.
void mhc_aggregate_forward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& out);
// g_out [T, C] → g_x [T, n·C] += g_out·h_pre[i]; g_h_pre [T, n] = Σ_C g_out·x_i (f32 products).
void mhc_aggregate_backward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& g_out,
                            const Tensor& g_x, const Tensor& g_h_pre);

// x [T, n·C] act, h_res [T, n, n], h_post [T, n], y [T, C] act, bias [C] act (undefined: none),
// post_scale [T, n·C] f32 (undefined: 1; the dropout path passes mask/(1−p)) → out [T, n·C]:
// out_j = Σ_i h_res[i,j]·x_i + post_scale_j ⊙ h_post[j]·(y + bias).
void mhc_merge_forward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                       const Tensor& bias, const Tensor& post_scale, bool keep_fp32, const Tensor& out);
// g_out [T, n·C] → g_x += Σ_j h_res[i,j] g_j; g_h_res [T, n, n] = Σ_C x_i·g_j; with g'_j = post_scale_j ⊙ g_j:
// g_h_post [T, n] = Σ_C g'_j·(y + bias); g_y [T, C] = Σ_j h_post[j]·g'_j (written); g_bias [C] += Σ_T g_y.
void mhc_merge_backward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                        const Tensor& bias, const Tensor& post_scale, bool keep_fp32, const Tensor& g_out,
                        const Tensor& g_x, const Tensor& g_h_res, const Tensor& g_h_post, const Tensor& g_y,
                        const Tensor& g_bias);

// Learned output contraction, all in f32: x [T, n·C] act, head_fn [n, n·C], head_base [n],
// head_scale [1] → out [T, C] act: rs = rsqrt(mean(x²) + eps); mix = (x·head_fnᵀ)·rs [T, n];
// pre = σ(mix·scale + base) + eps; out = Σ_j pre_j·x_j. eps = model.layernorm_epsilon.
void mhc_contract_forward(const Tensor& x, const Tensor& head_fn, const Tensor& head_base, const Tensor& head_scale,
                          double eps, const Tensor& out);
// g_out [T, C] → g_x [T, n·C] (accumulated), g_fn [n, n·C], g_base [n], g_scale [1] (accumulated).
void mhc_contract_backward(const Tensor& x, const Tensor& head_fn, const Tensor& head_base, const Tensor& head_scale,
                           double eps, const Tensor& g_out, const Tensor& g_x, const Tensor& g_fn,
                           const Tensor& g_base, const Tensor& g_scale);

// x [T, n·C] → out [T, C] = scale·Σ_j x_j (the mean contraction with scale 1/n; the expansion's
// backward with scale 1). Written.
void mhc_stream_sum(const Tensor& x, int64_t n, double scale, const Tensor& out);
// x [T, C] → out [T, n·C], out_j = scale·x for every stream j (the input expansion with scale 1; the
// mean contraction's backward with 1/n). Written.
void mhc_stream_broadcast(const Tensor& x, int64_t n, double scale, const Tensor& out);

// The ops that also have an unfused composition (kernels/mhc_composed.h) and argument checks
// shared by both paths (kernels/mhc_checks.h): F(op) for each.
#define STRATA_MHC_COMPOSED_OPS(F)                                                                  \
  F(mhc_mappings_forward) F(mhc_mappings_backward) F(mhc_aggregate_forward) F(mhc_aggregate_backward) \
  F(mhc_merge_forward) F(mhc_merge_backward)

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(mhc_mappings_forward)
STRATA_BACKEND_OP(mhc_mappings_backward)
STRATA_BACKEND_OP(mhc_compute_h_forward)
STRATA_BACKEND_OP(mhc_compute_h_backward)
STRATA_BACKEND_OP(mhc_sinkhorn_forward)
STRATA_BACKEND_OP(mhc_sinkhorn_backward)
STRATA_BACKEND_OP(mhc_aggregate_forward)
STRATA_BACKEND_OP(mhc_aggregate_backward)
STRATA_BACKEND_OP(mhc_merge_forward)
STRATA_BACKEND_OP(mhc_merge_backward)
STRATA_BACKEND_OP(mhc_contract_forward)
STRATA_BACKEND_OP(mhc_contract_backward)
STRATA_BACKEND_OP(mhc_stream_sum)
STRATA_BACKEND_OP(mhc_stream_broadcast)

}  // namespace strata::kernels
