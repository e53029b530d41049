// transformers' RoPE dict of the families with standard rotate_half RoPE over the whole head (Llama,
// Qwen3, Mixtral, Qwen3-MoE, gpt-oss): config.json's rope_parameters written from the model
// section, and read back from either spelling (used by training/hf/hf_format.cpp and
// hf_gpt_oss_format.cpp; DeepSeek-V3's MLA RoPE is hf_deepseek_format.cpp's).
//   plain RoPE, rotary_base                 ⇄ {"rope_type": "default", "rope_theta"}
//   rotary_seq_len_interpolation_factor N   ⇄ "linear" with factor N (an integer)
//   use_rope_scaling, rope_scaling_factor   ⇄ "llama3" with Megatron's fixed low_freq_factor 1,
//                                             high_freq_factor 4, original_max_position_embeddings 8192
//   position_embedding_type yarn            ⇄ "yarn" (factor, original_max_position_embeddings,
//                                             beta_fast, beta_slow, truncate, mscale / mscale_all_dim
//                                             or attention_factor: hf_yarn_read.h)
// Reference: transformers modeling_rope_utils.py (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict,
// standardize_rope_params, _compute_yarn_parameters, _compute_llama3_parameters,
// _compute_linear_scaling_rope_parameters); Megatron-Core rotary_pos_embedding.py,
// yarn_rotary_pos_embedding.py.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "models/config/model_config.h"

namespace strata::hf::detail {

// config.json's rope_parameters for a finalized model with rotary positions (transformers 5's spelling).
nlohmann::ordered_json rope_parameters_json(const ResolvedModelConfig& m);

// The RoPE settings, in the Hub's older spelling (top-level rope_theta, rope_scaling) or transformers
// 5's (rope_parameters): as RotaryEmbeddingConfigMixin reads them, the dict is `rope_scaling or
// rope_parameters`, rope_theta comes from it, else the top level, else `default_theta` (the
// family's default_theta). Sets rotary_base and the scaling fields of m (position_embedding_type
// yarn for "yarn"); anything Strata cannot compute as transformers does (partial_rotary_factor,
// per-layer-type dicts, another rope type or llama3 constants) is an error naming the value, `arch`
// and `file`. Needs m.max_position_embeddings.
void read_rope_parameters(const nlohmann::json& j, double default_theta, const char* arch, const std::string& file,
                          ModelConfig& m);

}  // namespace strata::hf::detail
