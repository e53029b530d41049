// Full activation recompute for a block's layer loop (Megatron's recompute_granularity=full): which
// layers of a block are checkpointed (uniform: every layer, in chunks of recompute_num_layers;
// block: the first recompute_num_layers layers, one chunk each), and the chunk protocol every block
// kind (LayerStack, the MTP block) drives with two callbacks of its own:
//   forward:  run the chunk's layers WITHOUT saving (observations and auxiliary losses happen
//             here, once); keep only the chunk input, the dropout keys and the chunk's range of
//             the auxiliary-loss channel.
//   backward: inside a SuspendScope (no observation fires twice), re-run the chunk's forward from
//             the kept input with the same keys, saving, into a replay channel whose gradients are
//             the original channel's for that range (the losses are not added twice, their
//             gradients still flow), then run the layers' backward in reverse.
// Dropout masks are Philox streams keyed by (seed, step, layer, site) and the global position,
// so the replay draws the same masks; every per-micro-batch input the layers read lives in the
// saved chunk, which makes the protocol independent of the pipeline schedule.
// Reference: Megatron-Core transformer/transformer_block.py (_checkpointed_forward),
// tensor_parallel/random.py (CheckpointFunction), megatron/core/recompute.py.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "models/blocks/block.h"
#include "models/layers/layer_common.h"
#include "models/layers/loss.h"
#include "models/config/model_config.h"

namespace strata {

// Local layers [begin, end) of a block, checkpointed as one unit.
struct RecomputeChunk {
  size_t begin = 0, end = 0;
};

// The checkpointed chunks of a block of `num_layers` layers under the config (empty: nothing is
// recomputed, also for selective granularity, which the layers handle themselves).
std::vector<RecomputeChunk> full_recompute_chunks(const ResolvedModelConfig& cfg, size_t num_layers);

// What a checkpointed chunk keeps from its forward.
struct RecomputeSaved {
  Tensor input;                     // the chunk input [s, b, h]
  layers::DropoutKeys keys;         // the micro-batch's keys
  int64_t position_offset = 0;
  AuxLossChannel* aux = nullptr;    // the micro-batch's channel (null: no auxiliary losses)
  size_t aux_begin = 0, aux_end = 0;  // the chunk's losses in it
};

// Runs local layer i forward; save: keep its activations for backward (its own saved state);
// replay: a recompute forward (per-step side effects such as router token counts skipped).
using RecomputeLayerForward =
    std::function<Tensor(size_t i, const Tensor& x, AuxLossChannel* aux, bool save, bool replay)>;
// Runs local layer i backward from its saved state (and releases it); returns dx.
using RecomputeLayerBackward = std::function<Tensor(size_t i, const Tensor& dy)>;

// The chunk's forward without saving; fills *saved when not null (a training forward).
Tensor recompute_chunk_forward(const RecomputeChunk& c, const Tensor& x, AuxLossChannel* aux,
                               const RecomputeLayerForward& fwd, RecomputeSaved* saved);
// The replay and the backward of the chunk; releases the kept input.
Tensor recompute_chunk_backward(const RecomputeChunk& c, RecomputeSaved& saved, const Tensor& dy,
                                const RecomputeLayerForward& fwd, const RecomputeLayerBackward& bwd);

// The layer loop of a block (LayerStack) with its full-recompute chunks.
// layer(i, x, run, save, replay): local layer i's forward — save: into the block's saved state;
// replay: a recompute replay. saving: a training forward (the chunks are checkpointed; without
// it — evaluation, generation — every layer simply runs). saved_chunks: filled when saving.
using BlockLayerForward =
    std::function<Tensor(size_t i, const Tensor& x, const BlockRun& run, bool save, bool replay)>;
Tensor recompute_layers_forward(const std::vector<RecomputeChunk>& chunks, size_t num_layers, const Tensor& x,
                                const BlockRun& run, bool saving, std::vector<RecomputeSaved>* saved_chunks,
                                const BlockLayerForward& layer);
// The backward of that loop: a checkpointed chunk is replayed (with its saved keys) and then run
// backward, every other layer runs backward from its saved state (bwd releases it).
Tensor recompute_layers_backward(const std::vector<RecomputeChunk>& chunks, size_t num_layers,
                                 std::vector<RecomputeSaved>& saved_chunks, const Tensor& dy,
                                 const BlockLayerForward& layer, const RecomputeLayerBackward& bwd);

}  // namespace strata
