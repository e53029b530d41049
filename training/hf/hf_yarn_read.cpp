// transformers' yarn rope parameters as Megatron's YaRN fields (see hf_yarn_read.h).
// Reference: transformers modeling_rope_utils.py (standardize_rope_params, _compute_yarn_parameters).
#include "training/hf/hf_yarn_read.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/rotary.h"
#include "training/hf/hf_json_read.h"

namespace strata::hf::detail {

double read_yarn_frequencies(const nlohmann::json& r, const nlohmann::json& j, const std::string& what,
                             const std::string& file, ModelConfig& m) {
  const double max_positions = static_cast<double>(*m.max_position_embeddings);
  const double original = opt_double(j, "original_max_position_embeddings",
                                     opt_double(r, "original_max_position_embeddings", max_positions, file), file);
  STRATA_CHECK(original == std::floor(original) && original > 0, what, ": original_max_position_embeddings ",
               original, " is not a positive integer (model.yarn_original_max_position_embeddings)");
  m.yarn_original_max_position_embeddings = static_cast<int64_t>(original);
  const double factor = opt_double(r, "factor", max_positions / original, file);
  STRATA_CHECK(std::isfinite(factor) && factor > 0, what, ": factor ", factor, " must be > 0 (model.rotary_scaling_factor)");
  m.rotary_scaling_factor = factor;
  const double beta_fast = opt_double(r, "beta_fast", 0.0, file), beta_slow = opt_double(r, "beta_slow", 0.0, file);
  m.yarn_beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
  m.yarn_beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
  m.yarn_correction_range_round_to_int =
      r.contains("truncate") ? !r.at("truncate").is_null() && opt_bool(r, "truncate", true, file) : true;
  return factor;
}

double mscale_for_attention_factor(double a, double factor, double mscale_all_dim, const std::string& what) {
  STRATA_CHECK(std::isfinite(a) && a > 0, what, ": attention_factor ", a, " must be finite and > 0");
  if (factor <= 1.0) {
    STRATA_CHECK(a == 1.0, what, ": attention_factor ", a, " with factor ", factor,
                 " <= 1 cannot be represented (Megatron's YaRN concentration factor is 1 when "
                 "model.rotary_scaling_factor <= 1, whatever model.mscale says)");
    return 1.0;
  }
  const double mscale = (a * kernels::yarn_get_mscale(factor, mscale_all_dim) - 1.0) / (0.1 * std::log(factor));
  const double back = kernels::yarn_concentration_factor(factor, mscale, mscale_all_dim);
  STRATA_CHECK(std::abs(back - a) <= 16 * std::numeric_limits<double>::epsilon() * a, what, ": attention_factor ",
               a, " is not represented by model.mscale ", mscale, " (which gives ", back, ")");
  return mscale;
}

}  // namespace strata::hf::detail
