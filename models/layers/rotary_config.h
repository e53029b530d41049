// The rotary-embedding options (kernels::RotaryOptions) that the model section selects: plain RoPE
// (rotary_base, rotary_percent, Llama 3 scaling, position interpolation, interleaving) or YaRN
// (position_embedding_type yarn: rotary_scaling_factor, yarn_*, and the concentration factor from
// mscale / mscale_all_dim multiplying cos and sin). The caller sets position_offset / positions.
// Reference: Megatron-Core models/gpt/gpt_model.py (RotaryEmbedding / YarnRotaryEmbedding from the
// config), transformer/attention.py (_yarn_concentration_factor passed to apply_rotary_pos_emb as
// mscale; the softmax scale stays 1/sqrt(kv_channels) outside MLA),
// models/common/embeddings/yarn_rotary_pos_embedding.py (_yarn_get_concentration_factor_from_config).
#pragma once
#include "kernels/rotary.h"
#include "models/config/model_config.h"

namespace strata::layers {

// YaRN's options from the model section: base = rotary_base, yarn_factor = rotary_scaling_factor,
// yarn_original_max_position_embeddings, yarn_beta_fast / _slow, yarn_round_to_int =
// yarn_correction_range_round_to_int, mscale = yarn_concentration_factor(rotary_scaling_factor,
// mscale, mscale_all_dim). Whatever position_embedding_type says (multi-latent attention reads it
// for its rotary half too).
kernels::RotaryOptions yarn_rotary_options(const ResolvedModelConfig& m);

// The options of standard attention's RoPE: yarn_rotary_options for position_embedding_type yarn,
// else plain RoPE with rotary_percent, Llama 3's scaling (use_rope_scaling), position
// interpolation and rotary_interleaved.
kernels::RotaryOptions attention_rotary_options(const ResolvedModelConfig& m);

}  // namespace strata::layers
