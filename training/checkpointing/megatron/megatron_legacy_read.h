// Megatron-Core's legacy checkpoints (`--ckpt-format torch`), read natively (no Python), into the
// same MegatronCheckpoint as the torch_dist reader (megatron_checkpoint.h): an iteration directory
// holds one torch.save file per model-parallel rank, `mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt`
// (TT the tensor-parallel rank, PPP the pipeline stage when pipelining, EEE the expert-parallel
// rank when experts are parallel), each with that rank's local state dict under Megatron's module
// names (`model`, or `model0`, `model1`, … for a virtual pipeline), the run state (`iteration`,
// `args`, `opt_param_scheduler`, `checkpoint_version`) and the optimizer (torch's Adam state_dict
// indexed by parameter, or with the distributed optimizer `distrib_optim.pt` beside it: flat
// per-buffer states in Megatron's DDP buffer layout). Every rank file is read; a tensor-parallel
// shard becomes pieces of the global tensor (column-parallel weights along dim 0, row-parallel
// along dim 1, a gated unit's local [gate_r; up_r] as two pieces), a pipeline stage's layers are
// renumbered after the stages before it, an expert-parallel rank's experts after the ranks before
// it. Tensors are read lazily, when the loader fetches a piece.
// Reference: megatron/training/checkpointing.py (get_checkpoint_name, generate_state_dict,
// save_checkpoint / load_checkpoint with ckpt_format 'torch'), megatron/core/tensor_parallel/
// layers.py (ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding: partition_dim),
// megatron/core/transformer/transformer_layer.py (get_transformer_layer_offset),
// megatron/core/optimizer/__init__.py (_get_param_groups), megatron/core/optimizer/optimizer.py
// (FP32Optimizer / Float16OptimizerWithFloat16Params.state_dict), megatron/core/optimizer/
// distrib_optimizer.py (get_parameter_state_dp_zero, save_parameter_state).
#pragma once
#include <string>
#include <vector>

#include "core/formats/py_value.h"
#include "core/parameter.h"
#include "training/checkpointing/megatron/megatron_checkpoint.h"

namespace strata {

// Reads a legacy iteration directory. `params`: this rank's checkpointed tensors (Strata names);
// they decide which norm spelling a tensor gets (megatron_names.h) and check the global shapes.
// Errors name the file and the key.
MegatronCheckpoint read_megatron_legacy(const std::string& iteration_dir, const std::vector<Parameter*>& params);

// The top-level dict of the first rank file (args, iteration, opt_param_scheduler, …), for the
// saved config and the scheduler; its tensors are not readable after the call.
formats::PyRef read_megatron_legacy_common(const std::string& iteration_dir);

}  // namespace strata
