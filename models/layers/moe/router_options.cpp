// RouterOptions helpers and Megatron's router option checks (see router_options.h).
// Reference: megatron/core/transformer/transformer_config.py (__post_init__ MoE checks).
#include "models/layers/moe/router_options.h"

#include "core/error.h"

namespace strata::layers::moe {

const char* score_function_name(ScoreFunction f) {
  switch (f) {
    case ScoreFunction::Softmax: return "softmax";
    case ScoreFunction::Sigmoid: return "sigmoid";
    case ScoreFunction::SqrtSoftplus: return "sqrtsoftplus";
  }
  return "?";
}

double RouterOptions::aux_loss_coeff(const std::string& type) const {
  for (size_t i = 0; i < moe_router_load_balancing_type.size() && i < moe_aux_loss_coeff.size(); ++i)
    if (moe_router_load_balancing_type[i] == type) return moe_aux_loss_coeff[i];
  return 0.0;
}

bool RouterOptions::aux_loss_enabled() const {
  return aux_loss_coeff("aux_loss") > 0 || aux_loss_coeff("seq_aux_loss") > 0 || aux_loss_coeff("global_aux_loss") > 0;
}

namespace {

void check_losses(const RouterOptions& o) {
  const auto& types = o.moe_router_load_balancing_type;
  const auto& coeffs = o.moe_aux_loss_coeff;
  STRATA_CHECK_KIND(ErrorKind::Config, !types.empty() && (coeffs.size() == types.size() || coeffs.size() == 1),
                    "moe_aux_loss_coeff has ", coeffs.size(), " values for ", types.size(),
                    " moe_router_load_balancing_type entries (need one, or one per type)");
  for (const auto& t : types)
    STRATA_CHECK_KIND(ErrorKind::Config,
                      t == "aux_loss" || t == "seq_aux_loss" || t == "global_aux_loss" || t == "none",
                      "moe_router_load_balancing_type '", t,
                      "' is not supported by the top-k router (aux_loss, seq_aux_loss, global_aux_loss, none)");
  for (double c : coeffs)
    STRATA_CHECK_KIND(ErrorKind::Config, c >= 0, "moe_aux_loss_coeff ", c, " must be >= 0");
  if (o.moe_z_loss_coeff)
    STRATA_CHECK_KIND(ErrorKind::Config, *o.moe_z_loss_coeff >= 0, "moe_z_loss_coeff must be >= 0");
}

}  // namespace

void check_router_options(const RouterOptions& o) {
  const int64_t E = o.num_moe_experts, k = o.moe_router_topk;
  STRATA_CHECK_KIND(ErrorKind::Config, E > 0, "num_experts must be > 0 for a MoE router, got ", E);
  STRATA_CHECK_KIND(ErrorKind::Config, o.hidden_size > 0, "hidden_size must be > 0, got ", o.hidden_size);
  STRATA_CHECK_KIND(ErrorKind::Config, k >= 1 && k <= E, "moe_router_topk ", k, " must be in [1, num_experts = ", E,
                    "]");
  const bool softmax = o.moe_router_score_function == ScoreFunction::Softmax;
  STRATA_CHECK_KIND(ErrorKind::Config, !(softmax && k == 1 && !o.moe_router_pre_softmax),
                    "moe_router_topk 1 with moe_router_score_function softmax needs moe_router_pre_softmax");
  STRATA_CHECK_KIND(ErrorKind::Config, !(softmax && o.moe_router_enable_expert_bias),
                    "moe_router_enable_expert_bias needs moe_router_score_function sigmoid or sqrtsoftplus, not softmax");
  check_losses(o);
  if (o.moe_router_topk_scaling_factor)
    STRATA_CHECK_KIND(ErrorKind::Config, *o.moe_router_topk_scaling_factor > 0,
                      "moe_router_topk_scaling_factor must be > 0");
  if (o.moe_input_jitter_eps)
    STRATA_CHECK_KIND(ErrorKind::Config, *o.moe_input_jitter_eps >= 0 && *o.moe_input_jitter_eps < 1,
                      "moe_input_jitter_eps must be in [0, 1), got ", *o.moe_input_jitter_eps);
  if (o.moe_expert_capacity_factor)
    STRATA_CHECK_KIND(ErrorKind::Config, *o.moe_expert_capacity_factor > 0, "moe_expert_capacity_factor must be > 0");
  STRATA_CHECK_KIND(ErrorKind::Config, !(o.moe_pad_expert_input_to_capacity && !o.moe_expert_capacity_factor),
                    "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor");
}

}  // namespace strata::layers::moe
