// The MoE part of layout planning (training/planning/memory_plan.h, `strata plan`): the parameters of one
// MoE layer on one rank and the all-to-all traffic of expert parallelism.
// Counting rules (Megatron-Core MoELayer):
//   dense (as a dense layer's): the attention block and its norms, the pre-MLP norm; the router
//     weight [E, h] is replicated over tp (its expert_bias [E] is an f32 buffer, not a parameter);
//     shared experts are a dense MLP of moe_shared_expert_intermediate_size split over tp
//     (column-parallel fc1, row-parallel fc2), their gate [1, h] replicated;
//   expert: E/ep local experts, each linear_fc1 [(2·)F, h] and linear_fc2 [h, F] (F =
//     moe_ffn_hidden_size; SwiGLU doubles fc1) split over etp.
//   The distributed optimizer shards the dense state over dp × cp and the expert state over the
//   expert-data-parallel group, world / (etp·ep·pp).
// All-to-all bytes one rank sends per MoE layer and micro-batch: its tokens t = micro_batch ·
// seq_length / cp (/ tp with sequence parallelism) each go to topk experts as h activations of
// e bytes, four times (dispatch and combine forward, their transposes backward), of which the
// fraction (ep − 1)/ep leaves the rank: 4 · t · topk · h · e · (ep − 1) / ep (0 at ep 1).
// Reference: megatron/core/transformer/moe/moe_layer.py, experts.py (TEGroupedMLP),
// shared_experts.py, router.py; token_dispatcher.py (MoEAlltoAllTokenDispatcher);
// megatron/core/parallel_state.py (expert-data-parallel group).
#pragma once
#include <cstdint>

#include "models/model_config.h"
#include "training/planning/memory_plan.h"

namespace strata {

// One MoE layer on one rank; dense_layer and dense_mlp: a dense layer and its MLP at this tp
// (gpt_parameter_counts), whose attention part the MoE layer shares.
ParameterCount moe_layer_parameters(const ModelConfig& m, int64_t tp, int64_t ep, int64_t etp,
                                    const ParameterCount& dense_layer, const ParameterCount& dense_mlp);

// Bytes one rank sends in the all-to-alls of one MoE layer for one micro-batch (formula above).
int64_t moe_all_to_all_bytes(const ModelConfig& m, int64_t micro_batch_size, int64_t tp, int64_t cp,
                             bool sequence_parallel, int64_t ep, int64_t element_bytes);

// MoE layers among global layers [first, first + count).
int64_t moe_layers_in(const ModelConfig& m, int64_t first, int64_t count);

}  // namespace strata
