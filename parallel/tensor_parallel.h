// Tensor-parallel communication mappings (the autograd functions of Megatron-Core
// tensor_parallel/mappings.py written as explicit forward/backward calls) and the helpers that see
// a Parameter as a shard of its global tensor: gathering a sharded parameter back into the global
// tensor (tests, checkpoints), and which parameters count in the global gradient norm.
// Sequence dimension is dim 0 ([s, b, h] layout); every helper takes contiguous tensors.
// Reference: Megatron-Core tensor_parallel/mappings.py (gather_from_sequence_parallel_region,
// reduce_scatter_to_sequence_parallel_region, reduce_from_tensor_model_parallel_region),
// tensor_parallel/layers.py (param_is_not_tensor_parallel_duplicate).
#pragma once
#include "core/tensor.h"
#include "core/parameter.h"
#include "parallel/process_group.h"

namespace strata::tp {

// x: [n, ...] on every rank -> [size·n, ...], the ranks' x concatenated along dim 0.
Tensor gather_dim0(const Tensor& x, const ProcessGroup& g);
// x: [size·n, ...] -> [n, ...]: rank r gets the sum over ranks of rows [r·n, (r+1)·n).
Tensor reduce_scatter_dim0(const Tensor& x, const ProcessGroup& g);
// x: [size·n, ...] -> rows [r·n, (r+1)·n) (a contiguous copy; no communication).
Tensor split_dim0(const Tensor& x, const ProcessGroup& g);
// x summed over the group (a new tensor; x itself at size 1).
Tensor all_reduce_sum(const Tensor& x, const ProcessGroup& g);

// The global tensor of a parameter from the local `part` (its value or main_grad, shaped like
// the value) of every rank of `tp`. Replicated parameters (!p.tensor_parallel) return `part`
// itself (not a copy).
// Collective over tp for sharded ones. Blocks: Parameter::blocks (or Parameter::slice).
Tensor gather_parameter(const Parameter& p, const Tensor& part, const ProcessGroup& tp);

// Megatron param_is_not_tensor_parallel_duplicate: sharded parameters count on every tp rank,
// replicated ones only on tp rank 0 (grad norm, num-zeros).
inline bool counts_in_grad_norm(const Parameter& p, int tp_rank) { return p.tensor_parallel || tp_rank == 0; }

}  // namespace strata::tp
