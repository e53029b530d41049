// Mixture-of-experts token dispatch on one rank: routing tables, permute / unpermute of token rows
// and the grouped expert GEMM, each with its backward. Megatron-Core semantics
// (transformer/moe/moe_utils.py permute / unpermute, experts.py TEGroupedMLP): permuted rows are
// grouped by expert in ascending expert id and, within an expert, by ascending token id; with
// pad-to-capacity every expert block has exactly `capacity` rows. Every result is deterministic
// on both backends (no atomics): a token's copies are summed in ascending permuted-row order,
// i.e. by ascending expert id. Padding rows are zero rows (Megatron fills them with tokens whose
// probability is 0, which contributes the same zero through the probability-weighted paths).
//
// Typical use (probabilities applied after the expert activation, as Megatron does):
//   MoeRouting r = moe_routing(top_indices, &keep, E);          // [T, k] -> row tables
//   moe_permute_forward(x, r.row_map, xp);                       // [T, H] -> [N, H]
//   moe_permute_probs_forward(top_probs, r.pair_rows, pp);      // [T, k] -> [N]
//   moe_grouped_linear_forward(xp, w1, r.rows_per_expert, h);    // experts' fc1 ... fc2 -> y
//   moe_unpermute_forward(y, r.pair_rows, nullptr, out);         // [N, H] -> [T, H]
// moe_scale_rows_* multiplies rows by their probability (after the activation, or on the input
// for moe_apply_probs_on_input); moe_unpermute_* can also apply the probabilities itself.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/gemm.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

struct MoeRoutingOptions {
  // This rank's experts are global ids [expert_start, expert_start + num_experts); pairs routed
  // elsewhere are not local and get no row (the all-gather dispatcher's local map).
  int64_t expert_start = 0;
  // > 0: every expert id must lie in [0, num_experts_global) (negative ids are always errors).
  int64_t num_experts_global = 0;
  // >= 0: pad to capacity: expert e's block is rows [e·capacity, (e+1)·capacity), its kept pairs
  // first (ascending token), then zero padding rows. More kept pairs than capacity is an error.
  // < 0: dropless, blocks of exactly the kept pairs.
  int64_t capacity = -1;
};

// The routing tables of one batch (on top_indices' device); N = Σ rows_per_expert.
struct MoeRouting {
  Tensor row_map;            // [N] i64: source token of each permuted row, -1 for a padding row
  Tensor pair_rows;          // [T, k] i64: permuted row of pair (t, s), -1 when dropped / not local
  Tensor tokens_per_expert;  // [E] i64: kept pairs per local expert (padding rows not counted)
  std::vector<int64_t> rows_per_expert;  // host [E]: rows of each expert block (capacity if padded)
  int64_t rows() const { return row_map.defined() ? row_map.numel() : 0; }
};

// top_indices: [T, k] i64 or i32 (expert id of each token's s-th choice), keep: [T, k] bool or u8
// or null (false: the pair was dropped by capacity), E = num_experts local experts -> MoeRouting.
// Duplicate ids within a token are allowed (their rows follow slot order). On CUDA this copies
// the E counts to the host (a stream synchronization), as the grouped GEMM needs them there.
MoeRouting moe_routing(const Tensor& top_indices, const Tensor* keep, int64_t num_experts,
                       const MoeRoutingOptions& options = {});

// x: [T, H], row_map: [N] i64 -> permuted: [N, H] (x's dtype); permuted[r] = x[row_map[r]], or
// zeros where row_map[r] < 0. Any row map with entries in [-1, T) works (e.g. a chunk sort).
void moe_permute_forward(const Tensor& x, const Tensor& row_map, const Tensor& permuted);
// dpermuted: [N, H], pair_rows: [T, k] -> dx: [T, H]; dx[t] = Σ dpermuted[r] over t's rows r
// (pair_rows[t, :] >= 0) in ascending r, accumulated in f32 (f64 for f64), zero when none.
void moe_permute_backward(const Tensor& dpermuted, const Tensor& pair_rows, const Tensor& dx);

// probs: [T, k] (any float dtype), pair_rows: [T, k] -> permuted_probs: [N] (probs' dtype);
// permuted_probs[pair_rows[t, s]] = probs[t, s], padding rows 0 (exact copies).
void moe_permute_probs_forward(const Tensor& probs, const Tensor& pair_rows, const Tensor& permuted_probs);
// dpermuted_probs: [N], pair_rows: [T, k] -> dprobs: [T, k]; 0 for dropped / non-local pairs.
void moe_permute_probs_backward(const Tensor& dpermuted_probs, const Tensor& pair_rows, const Tensor& dprobs);

// y: [N, H] expert outputs, pair_rows: [T, k], probs: [N] f32/f64 or null (weights 1)
//   -> out: [T, H] (y's dtype); out[t] = Σ probs[r]·y[r] over t's rows in ascending r (ascending
//   expert id), accumulated in f32 (f64 for f64 y or f64 probs) and rounded once.
void moe_unpermute_forward(const Tensor& y, const Tensor& pair_rows, const Tensor* probs, const Tensor& out);
// dout: [T, H], y: [N, H], row_map: [N], probs: [N] or null
//   -> dy: [N, H] = probs[r]·dout[row_map[r]] (0 for padding rows)
//      dprobs: [N] (probs' dtype) = Σ_j y[r, j]·dout[row_map[r], j] (0 for padding; null: skipped;
//      needs probs).
void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& row_map, const Tensor* probs,
                            const Tensor& dy, const Tensor* dprobs);

// x: [N, H], scale: [N] f32/f64 -> out: [N, H] = scale[r]·x[r] (out may be x).
void moe_scale_rows_forward(const Tensor& x, const Tensor& scale, const Tensor& out);
// x: [N, H], scale: [N], dout: [N, H] -> dx: [N, H] = scale[r]·dout[r] (may be dout),
//   dscale: [N] (scale's dtype) = Σ_j x[r, j]·dout[r, j] (null: skipped).
void moe_scale_rows_backward(const Tensor& x, const Tensor& scale, const Tensor& dout, const Tensor& dx,
                             const Tensor* dscale);

// Grouped expert GEMM (Megatron GroupedMLP / TEGroupedMLP linear_fc1 / linear_fc2): rows of x are
// grouped by expert, rows_per_expert[e] rows for expert e (Σ = N).
// x: [N, in], w: E tensors [out, in] (or one [E, out, in]) -> y: [N, out]; y_e = x_e · w_eᵀ.
// x, w, y share one dtype (f64, f32, bf16, f16). CPU: one gemm per expert; CUDA: ONE
// cublasGemmGroupedBatchedEx call for all non-empty experts.
void moe_grouped_linear_forward(const Tensor& x, const std::vector<Tensor>& w,
                                const std::vector<int64_t>& rows_per_expert, const Tensor& y,
                                const GemmOptions& options = {});
void moe_grouped_linear_forward(const Tensor& x, const Tensor& w, const std::vector<int64_t>& rows_per_expert,
                                const Tensor& y, const GemmOptions& options = {});
// x: [N, in], w: E × [out, in], dy: [N, out]
//   -> dx: [N, in] = dy_e · w_e per block (x's dtype; null: skipped)
//      dw: E × [out, in] (+)= dy_eᵀ · x_e (x's dtype, or f32 main grads for 16-bit x; empty list:
//      skipped). accumulate = false overwrites dw (an expert without rows gets zeros).
// On CUDA, f32 dw from bf16/f16 inputs is computed from exact f32 copies with TF32 tensor-core
// inputs (exact for 16-bit values) and f32 accumulation, straight into the main grads.
void moe_grouped_linear_backward(const Tensor& x, const std::vector<Tensor>& w, const Tensor& dy,
                                 const std::vector<int64_t>& rows_per_expert, const Tensor* dx,
                                 const std::vector<Tensor>& dw, bool accumulate, const GemmOptions& options = {});
void moe_grouped_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                 const std::vector<int64_t>& rows_per_expert, const Tensor* dx, const Tensor* dw,
                                 bool accumulate, const GemmOptions& options = {});

// Block sizes of the permuted layout: tokens_per_expert[e] (dropless, capacity < 0) or capacity
// for every expert; an expert with more kept pairs than the capacity is an error naming it.
std::vector<int64_t> moe_rows_per_expert(const std::vector<int64_t>& tokens_per_expert, int64_t capacity);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(moe_routing)
STRATA_BACKEND_OP(moe_permute_probs_forward)
STRATA_BACKEND_OP(moe_permute_probs_backward)

}  // namespace strata::kernels
