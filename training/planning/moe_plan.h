// The MoE part of layout planning (training/planning/memory_plan.h, `strata plan`): the all-to-all
// traffic of expert parallelism. (The experts' parameters come from the model manifest: E/ep local
// experts per rank, each split over etp; the distributed optimizer shards the dense state over
// dp × cp and the expert state over the expert-data-parallel group, world / (etp·ep·pp).)
// All-to-all bytes one rank sends per MoE layer and micro-batch: its tokens t = micro_batch ·
// seq_length / cp (/ tp with sequence parallelism) each go to topk experts as w activations of
// e bytes (w = moe_latent_size with latent MoE, else h: the rows are projected before the
// dispatch), four times (dispatch and combine forward, their transposes backward), of which the
// fraction (ep − 1)/ep leaves the rank: 4 · t · topk · w · e · (ep − 1) / ep (0 at ep 1).
// Reference: megatron/core/transformer/moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher),
// megatron/core/parallel_state.py (expert-data-parallel group).
#pragma once
#include <cstdint>

#include "models/config/model_config.h"
#include "training/planning/memory_plan.h"

namespace strata {

// Bytes one rank sends in the all-to-alls of one MoE layer for one micro-batch (formula above).
int64_t moe_all_to_all_bytes(const ResolvedModelConfig& m, int64_t micro_batch_size, int64_t tp, int64_t cp,
                             bool sequence_parallel, int64_t ep, int64_t element_bytes);

// MoE layers among global layers [first, first + count).
int64_t moe_layers_in(const ResolvedModelConfig& m, int64_t first, int64_t count);

}  // namespace strata
