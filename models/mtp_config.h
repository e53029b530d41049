// The multi-token-prediction part of the `model` config section: the field table (mtp_num_layers,
// mtp_loss_scaling_factor, mtp_use_repeated_layer, mtp_detach_heads, Megatron's names and
// defaults) and its rules. The members live in ModelConfig (models/model_config.h).
// Reference: megatron/training/arguments.py (_add_mtp_args, validate_args: MTP needs rope or none
// position embeddings), megatron/core/transformer/transformer_config.py (mtp_* fields),
// docs/user-guide/features/multi_token_prediction.md (unsupported: context parallelism,
// learned absolute positions).
#pragma once
#include "core/config_table.h"

namespace strata {

struct ModelConfig;
struct ParallelConfig;

// Adds the mtp_* fields to the model section's table.
void add_mtp_fields(config::SectionFields<ModelConfig>& f);
// The rules that need only the model section (position embeddings). Called by
// finalize_model_config(); throws config::ConfigError naming the field.
void finalize_mtp_config(ModelConfig& m);
// The rules involving the parallel layout (context parallelism is not supported with MTP).
void validate_mtp_layout(const ModelConfig& m, const ParallelConfig& p);

}  // namespace strata
