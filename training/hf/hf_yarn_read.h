// transformers' rope_type "yarn" read into Megatron's YaRN fields, shared by the families that
// carry it (Llama-like position_embedding_type yarn, DeepSeek-V3's MLA rope_type yarn).
// Reference: transformers modeling_rope_utils.py (standardize_rope_params, _compute_yarn_parameters),
// Megatron-Core yarn_rotary_pos_embedding.py (_yarn_get_mscale, _yarn_get_concentration_factor).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "models/config/model_config.h"

namespace strata::hf::detail {

// The frequencies, by transformers' rules: original_max_position_embeddings is the config's
// top-level key `j` when there is one (Phi-3's spelling, which wins), else the rope dict `r`'s, else
// max_position_embeddings; a null factor is max_position_embeddings / original; beta_fast /
// beta_slow default to 32 / 1 when missing, null or 0 (Python's `or`); truncate (default true; null
// is false) is yarn_correction_range_round_to_int. Sets those fields of m (max_position_embeddings
// set) and rotary_scaling_factor, and returns the factor. Errors name `what` and `file`.
double read_yarn_frequencies(const nlohmann::json& r, const nlohmann::json& j, const std::string& what,
                             const std::string& file, ModelConfig& m);

// The model.mscale for which Megatron's concentration factor get_mscale(factor, mscale) /
// get_mscale(factor, mscale_all_dim) is `a` (transformers' cos/sin attention factor); refused
// (naming `what`) where none gives it back to within a few ulps: factor <= 1 (the factor is then
// 1) with `a` other than 1.
double mscale_for_attention_factor(double a, double factor, double mscale_all_dim, const std::string& what);

}  // namespace strata::hf::detail
