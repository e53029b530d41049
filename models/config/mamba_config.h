// The Mamba-2 mixer's config fields (the `model` section's mamba_* fields, Megatron's names and
// defaults) and their rules. The fields live in ModelConfig; add_mamba_fields declares them in the
// config table; check_mamba_config checks what a model with Mamba layers needs (heads, groups and
// the tensor-parallel split), before anything is allocated — the `M` layer kind's layout check
// (models/blocks/mamba_kind.cpp) calls it when the pattern has an `M`, and MambaMixer calls it
// before making its parameters.
// Reference: megatron/core/transformer/transformer_config.py (mamba_state_dim, mamba_head_dim,
// mamba_num_groups, mamba_num_heads), megatron/core/ssm/mamba_mixer.py (expand = 2, the asserts
// on nheads, ngroups and tp_size; chunk_size = 128, a constructor argument there, a field here).
#pragma once
#include <cstdint>

#include "core/config_table.h"

namespace strata {

struct ModelConfig;

void add_mamba_fields(config::SectionFields<ModelConfig>& f);

// The mixer's sizes from a model config: d_inner = 2·hidden_size, or mamba_num_heads·head_dim.
struct MambaDims {
  int64_t d_model, d_inner, heads, head_dim, groups, state, chunk, conv_kernel = 4;
  int64_t conv_dim() const { return d_inner + 2 * groups * state; }              // x | B | C
  int64_t in_proj_out() const { return 2 * d_inner + 2 * groups * state + heads; }  // z | x | B | C | dt
};
MambaDims mamba_dims(const ModelConfig& m);

// Throws config::ConfigError naming the field: d_inner % mamba_head_dim, heads % groups,
// heads % tp and groups % tp (tp = parallel.tensor_model_parallel_size).
void check_mamba_config(const ModelConfig& m, int64_t tensor_model_parallel_size);

}  // namespace strata
