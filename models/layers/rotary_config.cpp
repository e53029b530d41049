// The rotary-embedding options of the model section (models/layers/rotary_config.h).
// Reference: Megatron-Core models/gpt/gpt_model.py (GPTModel.__init__: RotaryEmbedding /
// YarnRotaryEmbedding arguments), transformer/attention.py (_yarn_concentration_factor).
#include "models/layers/rotary_config.h"

namespace strata::layers {

kernels::RotaryOptions yarn_rotary_options(const ResolvedModelConfig& m) {
  kernels::RotaryOptions o;
  o.base = static_cast<double>(m->rotary_base);
  o.yarn_factor = m->rotary_scaling_factor;
  o.yarn_original_max_position_embeddings = m->yarn_original_max_position_embeddings;
  o.yarn_beta_fast = m->yarn_beta_fast;
  o.yarn_beta_slow = m->yarn_beta_slow;
  o.yarn_round_to_int = m->yarn_correction_range_round_to_int;
  o.mscale = kernels::yarn_concentration_factor(m->rotary_scaling_factor, m->mscale, m->mscale_all_dim);
  return o;
}

kernels::RotaryOptions attention_rotary_options(const ResolvedModelConfig& m) {
  if (m->position_embedding_type == PositionEmbeddingType::Yarn) return yarn_rotary_options(m);
  kernels::RotaryOptions o;
  o.rotary_percent = m->rotary_percent;
  o.base = static_cast<double>(m->rotary_base);
  o.llama3_scaling_factor = m->use_rope_scaling ? m->rope_scaling_factor : 0.0;
  o.seq_len_interpolation_factor = static_cast<double>(m->rotary_seq_len_interpolation_factor.value_or(1));
  o.interleaved = m->rotary_interleaved;
  return o;
}

}  // namespace strata::layers
