// The multi-token-prediction part of the `model` config section: the field table (mtp_num_layers,
// mtp_loss_scaling_factor, mtp_use_repeated_layer, mtp_detach_heads, Megatron's names and
// defaults) and its rules. The members live in ModelConfig (models/config/model_config.h).
// Reference: megatron/training/arguments.py (_add_mtp_args, validate_args: MTP needs rope or none
// position embeddings), megatron/core/transformer/transformer_config.py (mtp_* fields),
// docs/user-guide/features/multi_token_prediction.md (unsupported: context parallelism,
// learned absolute positions).
#pragma once
#include "core/config_table.h"

namespace strata {

struct ModelConfig;
class ResolvedModelConfig;
struct ParallelConfig;

// Adds the mtp_* fields to the model section's table.
void add_mtp_fields(config::SectionFields<ModelConfig>& f);
// The rules that need only the model section (position embeddings). Called by
// ResolvedModelConfig's resolution; throws config::ConfigError naming the field.
void finalize_mtp_config(ModelConfig& m);
// The rules involving the parallel layout (context parallelism is not supported with MTP).
void validate_mtp_layout(const ModelConfig& m, const ParallelConfig& p);

// The layers of one MTP depth's inner block: 1 for GPT, the '/' pattern's symbols for a hybrid
// model (0 without MTP).
int64_t mtp_layers_per_depth(const ResolvedModelConfig& m);
// The layer numbers the model uses: num_layers decoder layers, then D · mtp_layers_per_depth MTP
// inner layers (depth k's layer j is num_layers + (k−1)·P + j; the repeated layer uses depth 1's).
int64_t num_layers_with_mtp(const ResolvedModelConfig& m);
// The MoE layers among the MTP inner layers, counted as Megatron's MoE logging averages them
// (training.py: the repeated layer counts once).
int64_t mtp_moe_layers(const ResolvedModelConfig& m);

}  // namespace strata
