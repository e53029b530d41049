// The optimizer state of a Megatron torch_dist checkpoint, into Strata's tensor table
// (`optimizer.exp_avg.<name>`, `optimizer.exp_avg_sq.<name>`, `optimizer.master.<name>`) and the
// Adam step count. Megatron writes it in two ways: without the distributed optimizer, one tensor per
// parameter and state (`optimizer.state.exp_avg.<param key>`, stacked like the parameter); with it,
// flat per-bucket tensors of the DDP buffer (`…bucket_idx_<b>.{param,exp_avg,exp_avg_sq}`), placed
// back into parameters by Megatron's buffer layout (megatron_ddp_layout.h).
// Reference: megatron/core/optimizer/optimizer.py (FP32Optimizer/MixedPrecisionOptimizer
// sharded_state_dict, optim_state_to_sharding_state), megatron/core/optimizer/distrib_optimizer.py
// (sharded_param_state_dp_reshardable).
#pragma once
#include <vector>

#include "core/formats/dcp_reader.h"
#include "core/formats/py_value.h"
#include "core/parameter.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/megatron/megatron_tensor_table.h"

namespace strata {

// Adds the optimizer states of `dcp` to `table` and sets state.optimizer_step_count; false when the
// checkpoint holds no optimizer state. `params`: this rank's checkpointed tensors (Strata names).
bool read_megatron_optimizer(formats::DcpReader& dcp, const formats::PyRef& common, const std::vector<Parameter*>& params,
                             StoredTensorTable& table, CheckpointState& state, const MegatronChunkFetch& chunk);

}  // namespace strata
