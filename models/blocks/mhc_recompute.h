// Selective mHC recompute (recompute_granularity selective with 'mhc' in recompute_modules;
// Megatron dev's MHCCheckpointManager / CheckpointWithoutOutput around the hyper-connection ops):
// a block's local layers are split in order into groups of model.mhc_recompute_layer_num layers
// (null: one group for the whole local block / model chunk). Within a group every site keeps its
// mappings (h_pre, h_post, H_res and the projection, small) and the sub-layer's output y, but not
// its input (the previous merge's output [s, b, n·C]) nor the aggregation [s, b, C] its pre-norm
// keeps; the group input (the previous group's boundary output) stays. When the backward reaches
// the group's last layer, the dropped tensors are rebuilt in forward order from the group input
// (aggregate and merge replayed with the same dropout keys, no observation), then the backward
// proceeds. The sub-layers (attention, MLP, Mamba) are not recomputed. All state lives in the
// micro-batch's saved block state, so any pipeline schedule works.
// Reference: Megatron-LM dev megatron/core/transformer/hyper_connection.py, transformer_block.py
// (mhc_recompute_layer_num groups), tensor_parallel/random.py (CheckpointWithoutOutput).
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "models/blocks/recompute.h"
#include "models/config/model_config.h"

namespace strata {

struct MhcRecomputeGroups {
  std::vector<RecomputeChunk> groups;  // empty: no mhc recompute
  bool active() const { return !groups.empty(); }
  // Local layer i is the first / last layer of its group.
  bool opens(size_t i) const;
  bool closes(size_t i) const;
  size_t group_begin(size_t i) const;  // the first layer of i's group
};

// The groups of a block of num_layers local layers under the config.
MhcRecomputeGroups mhc_recompute_groups(const ResolvedModelConfig& cfg, size_t num_layers);

// Before the backward of local layer i: when i closes a group, rebuild the group's dropped
// tensors. replay(l, x) rebuilds layer l from its input x (undefined: the layer's kept input) and
// returns its output.
void mhc_replay_group(const MhcRecomputeGroups& g, size_t i,
                      const std::function<Tensor(size_t l, const Tensor& x)>& replay);

}  // namespace strata
