// The two row primitives the MoE ops of kernels/moe.h share on each backend (not ops themselves:
// kernels/moe.cpp checks the arguments and dispatches to them). Private to kernels/: the signature
// is written once, as a function type, and each backend declares its function from it.
// Reference: megatron/core/transformer/moe/moe_utils.py (permute, unpermute).
#pragma once
#include "core/tensor.h"

namespace strata::kernels {

// src [S, H], row_map [N] (null: identity), scale [N] (null: 1)
//   -> out [N, H] = scale[r]·src[row_map[r]] (zeros where row_map[r] < 0);
//      dscale [N] (may be null) = Σ_j dot_with[r, j]·src[row_map[r], j].
// out may be src or dot_with (each element is read before it is written).
using MoeGatherRows = void(const Tensor& src, const Tensor* row_map, const Tensor* scale, const Tensor& out,
                           const Tensor* dot_with, const Tensor* dscale);
// src [N, H], pair_rows [T, k], weights [N] (null: 1) -> out [T, H] = Σ weights[r]·src[r] over t's
// rows, ascending r.
using MoeCombineRows = void(const Tensor& src, const Tensor& pair_rows, const Tensor* weights, const Tensor& out);

namespace cpu {
MoeGatherRows moe_gather_rows;
MoeCombineRows moe_combine_rows;
}  // namespace cpu
namespace cuda {
MoeGatherRows moe_gather_rows;
MoeCombineRows moe_combine_rows;
}  // namespace cuda

}  // namespace strata::kernels
