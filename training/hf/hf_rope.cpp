// The RoPE dict of config.json (training/hf/hf_rope.h).
// Reference: transformers modeling_rope_utils.py (standardize_rope_params, _compute_yarn_parameters,
// _compute_llama3_parameters), Megatron-Core yarn_rotary_pos_embedding.py.
#include "training/hf/hf_rope.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/rotary.h"
#include "training/hf/hf_json_read.h"
#include "training/hf/hf_yarn_read.h"

namespace strata::hf::detail {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

// transformers' rope_type "yarn" (modeling_rope_utils.py _compute_yarn_parameters after
// standardize_rope_params) as position_embedding_type yarn, by transformers' rules:
// original_max_position_embeddings is the config's top-level key when there is one (Phi-3's
// spelling, which wins), else the dict's, else max_position_embeddings; a null factor is
// max_position_embeddings / original_max_position_embeddings; beta_fast / beta_slow default to 32 / 1
// when missing, null or 0 (Python's `or`); truncate (default true; null is false) is
// yarn_correction_range_round_to_int. The concentration factor (transformers' attention_factor on
// cos and sin, Megatron's mscale) is attention_factor when given, else get_mscale(factor, mscale) /
// get_mscale(factor, mscale_all_dim) when both are non-zero, else get_mscale(factor): Megatron's
// formula with mscale 1 and mscale_all_dim 0 (so a lone mscale is ignored, as transformers does).
// An attention_factor that the mscale pair does not give is kept as mscale_for_attention_factor.
void read_yarn(const json& r, const json& j, const std::string& what, const std::string& file, ModelConfig& m) {
  m.position_embedding_type = PositionEmbeddingType::Yarn;
  const double factor = read_yarn_frequencies(r, j, what, file, m);
  const double mscale = opt_double(r, "mscale", 0.0, file), all_dim = opt_double(r, "mscale_all_dim", 0.0, file);
  const bool pair = mscale != 0.0 && all_dim != 0.0;
  m.mscale = pair ? mscale : 1.0;
  m.mscale_all_dim = pair ? all_dim : 0.0;
  if (!r.contains("attention_factor") || r.at("attention_factor").is_null()) return;
  const double a = get_double(r, "attention_factor", file);
  const double derived = kernels::yarn_concentration_factor(factor, m.mscale, m.mscale_all_dim);
  if (std::abs(derived - a) <= 8 * std::numeric_limits<double>::epsilon() * a) return;
  m.mscale = mscale_for_attention_factor(a, factor, 0.0, what);
  m.mscale_all_dim = 0.0;
}

// transformers 5's rope_parameters of position_embedding_type yarn, which transformers'
// _compute_yarn_parameters turns back into the same frequencies and concentration factor:
// mscale / mscale_all_dim when both are non-zero (transformers then takes their ratio, as Megatron),
// and attention_factor where transformers' own rule (get_mscale(factor) without the pair) would give
// another factor than Megatron's (model.mscale other than 1 with mscale_all_dim 0, or mscale 0).
ojson yarn_rope_json(const ResolvedModelConfig& m) {
  const double factor = m->rotary_scaling_factor;
  ojson rope = {{"rope_theta", static_cast<double>(m->rotary_base)},
                {"rope_type", "yarn"},
                {"factor", factor},
                {"original_max_position_embeddings", m->yarn_original_max_position_embeddings},
                {"beta_fast", m->yarn_beta_fast},
                {"beta_slow", m->yarn_beta_slow},
                {"truncate", m->yarn_correction_range_round_to_int}};
  const bool pair = m->mscale != 0.0 && m->mscale_all_dim != 0.0;
  if (pair) {
    rope["mscale"] = m->mscale;
    rope["mscale_all_dim"] = m->mscale_all_dim;
  }
  const double ours = kernels::yarn_concentration_factor(factor, m->mscale, m->mscale_all_dim);
  const double theirs = pair ? ours : kernels::yarn_get_mscale(factor);
  if (std::abs(ours - theirs) > 8 * std::numeric_limits<double>::epsilon() * ours) rope["attention_factor"] = ours;
  return rope;
}

// The RoPE settings, in the Hub's older spelling (top-level rope_theta, rope_scaling) or transformers
// 5's (rope_parameters {"rope_type", "rope_theta", ...}): as RotaryEmbeddingConfigMixin reads them,
// the dict is `rope_scaling or rope_parameters`, rope_theta comes from the dict, else the top level,
// else the family's default_theta (Mixtral 1e6, gpt-oss 150000, the others 1e4), and a llama3 dict without
// original_max_position_embeddings takes max_position_embeddings (standardize_rope_params).
// "default" is plain RoPE; "llama3" with Megatron's fixed constants (low_freq_factor 1,
// high_freq_factor 4, original_max_position_embeddings 8192) is model.use_rope_scaling; "yarn" is
// position_embedding_type yarn (read_yarn). Anything else is an error naming the file and the
// value. Needs m->max_position_embeddings.
}  // namespace

void read_rope_parameters(const json& j, double dflt_theta, const char* arch, const std::string& file, ModelConfig& m) {
  const bool legacy = j.contains("rope_scaling") && !j.at("rope_scaling").is_null();
  const char* key = legacy ? "rope_scaling" : "rope_parameters";
  const json r = j.contains(key) && !j.at(key).is_null() ? j.at(key) : json::object();
  const std::string what = file + ": " + key + " " + r.dump();
  STRATA_CHECK(r.is_object(), what, " is not an object");
  for (auto it = r.begin(); it != r.end(); ++it)
    STRATA_CHECK(!it.value().is_object(), what, " gives layer type '", it.key(), "' its own RoPE, which is not "
                 "supported (one RoPE for every layer)");
  const double theta = opt_double(r, "rope_theta", opt_double(j, "rope_theta", dflt_theta, file), file);
  STRATA_CHECK(theta == std::floor(theta) && theta > 0, file, ": rope_theta ", theta,
               " is not a positive integer (model.rotary_base is an integer)");
  m.rotary_base = static_cast<int64_t>(theta);
  const double partial = opt_double(r, "partial_rotary_factor", opt_double(j, "partial_rotary_factor", 1.0, file), file);
  STRATA_CHECK(partial == 1.0, file, ": partial_rotary_factor ", partial, " is not supported (", arch,
               " rotates the whole head)");
  const std::string type = r.contains("rope_type") ? opt_string(r, "rope_type", "default", file)
                                                   : opt_string(r, "type", "default", file);
  if (type == "default") return;
  if (type == "linear") {  // positions / factor: Megatron's --rotary-seq-len-interpolation-factor (an integer)
    const double factor = opt_double(r, "factor", 1.0, file);
    STRATA_CHECK(factor >= 1 && factor == std::floor(factor), what,
                 ": a linear factor must be a positive integer (model.rotary_seq_len_interpolation_factor)");
    m.rotary_seq_len_interpolation_factor = static_cast<int64_t>(factor);
    return;
  }
  if (type == "yarn") return read_yarn(r, j, what, file, m);
  STRATA_CHECK(type == "llama3", what,
               " is not supported (plain RoPE, rope_type \"default\", position interpolation \"linear\", "
               "Llama 3's \"llama3\" or \"yarn\")");
  STRATA_CHECK(opt_double(r, "low_freq_factor", 1.0, file) == 1.0 && opt_double(r, "high_freq_factor", 4.0, file) == 4.0 &&
                   opt_double(r, "original_max_position_embeddings",
                              static_cast<double>(*m.max_position_embeddings), file) == 8192.0,
               what, " is not supported: Strata (as Megatron's --use-rope-scaling) fixes low_freq_factor 1, "
               "high_freq_factor 4 and original_max_position_embeddings 8192");
  m.use_rope_scaling = true;
  m.rope_scaling_factor = opt_double(r, "factor", 8.0, file);
  STRATA_CHECK(m.rope_scaling_factor > 0, what, ": factor must be positive");
}

ojson rope_parameters_json(const ResolvedModelConfig& m) {
  if (m->position_embedding_type == PositionEmbeddingType::Yarn) return yarn_rope_json(m);
  // Megatron's --use-rope-scaling is the "llama3" rope type with Megatron's fixed low/high frequency
  // factors 1 and 4 and original context 8192.
  STRATA_CHECK(!(m->use_rope_scaling && m->rotary_seq_len_interpolation_factor),
               "hf export: transformers has no rope_type for Llama 3's scaling and position interpolation together "
               "(model.use_rope_scaling with model.rotary_seq_len_interpolation_factor)");
  const double theta = static_cast<double>(m->rotary_base);
  if (m->use_rope_scaling)
    return {{"rope_theta", theta},
            {"rope_type", "llama3"},
            {"factor", m->rope_scaling_factor},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192}};
  if (m->rotary_seq_len_interpolation_factor)
    return {{"rope_theta", theta},
            {"rope_type", "linear"},
            {"factor", static_cast<double>(*m->rotary_seq_len_interpolation_factor)}};
  return {{"rope_theta", theta}, {"rope_type", "default"}};
}

}  // namespace strata::hf::detail
