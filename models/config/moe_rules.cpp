// Megatron's mixture-of-experts config rules (models/config/moe_config.h): finalize_moe_config (the model
// section alone) and validate_moe_layout (against the parallel layout). Each rejection is a
// ConfigError naming the fields; the rules marked "Strata" refuse options that Megatron silently
// ignores or that would route nonsensically, the others are Megatron's.
// Reference: megatron/core/transformer/transformer_config.py (__post_init__),
// megatron/training/arguments.py (validate_args: MoE spec and expert-parallelism checks),
// megatron/core/transformer/moe/{moe_utils,experts,shared_experts,moe_layer}.py.
#include <set>
#include <string>

#include "models/config/model_config.h"
#include "models/config/moe_config.h"
#include "parallel/parallel_config.h"

namespace strata {

using config::ConfigError;

namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

// Megatron: "moe_ffn_hidden_size is set but num_moe_experts is None"; Strata extends it to every
// moe_* field, since none of them has an effect on a dense model.
void check_dense_model(const ModelConfig& m) {
  auto fields = model_config_fields();
  for (const auto& f : fields.fields()) {
    if (f.name.rfind("moe_", 0) != 0) continue;
    if (f.get(&m) != f.default_value)
      throw ConfigError("model." + f.name,
                        "is set but model.num_experts is null (a dense model); set "
                        "model.num_experts or remove model." +
                            f.name);
  }
}

void check_router(const ModelConfig& m) {
  const int64_t experts = *m.num_experts, k = m.moe_router_topk;
  if (k > experts)
    throw ConfigError("model.moe_router_topk", str(k) + " exceeds model.num_experts (" + str(experts) + ")");
  const bool softmax = m.moe_router_score_function == MoeScoreFunction::Softmax;
  if (m.moe_router_enable_expert_bias && softmax)
    throw ConfigError("model.moe_router_enable_expert_bias",
                      "needs model.moe_router_score_function sigmoid or sqrtsoftplus (it is softmax)");
  if (k == 1 && softmax && !m.moe_router_pre_softmax)
    throw ConfigError("model.moe_router_pre_softmax",
                      "must be true with model.moe_router_topk 1 and model.moe_router_score_function softmax "
                      "(a softmax over the one selected logit has a zero gradient)");
  if (m.moe_router_group_topk && !m.moe_router_num_groups)
    throw ConfigError("model.moe_router_group_topk", "needs model.moe_router_num_groups (group-limited routing)");
  if (m.moe_router_num_groups && !m.moe_router_group_topk)  // Strata: Megatron ignores it
    throw ConfigError("model.moe_router_num_groups", "has no effect without model.moe_router_group_topk");
  if (!m.moe_router_num_groups) return;
  const int64_t groups = *m.moe_router_num_groups, g = *m.moe_router_group_topk;
  if (experts % groups != 0)
    throw ConfigError("model.num_experts",
                      str(experts) + " is not divisible by model.moe_router_num_groups (" + str(groups) + ")");
  if (g > groups)
    throw ConfigError("model.moe_router_group_topk",
                      str(g) + " exceeds model.moe_router_num_groups (" + str(groups) + ")");
  if (g > k)  // Strata: groups are scored by their top k/g experts, 0 when g > k
    throw ConfigError("model.moe_router_group_topk",
                      str(g) + " exceeds model.moe_router_topk (" + str(k) +
                          "); each group is scored by the sum of its top moe_router_topk/moe_router_group_topk scores");
  if (k > g * (experts / groups))  // Strata: top-k among the experts of the selected groups
    throw ConfigError("model.moe_router_topk", str(k) + " exceeds the " + str(g * (experts / groups)) +
                                                   " experts of the model.moe_router_group_topk (" + str(g) +
                                                   ") selected groups of " + str(experts / groups));
}

void check_load_balancing(const ModelConfig& m) {
  const auto& types = m.moe_router_load_balancing_type;
  const auto& coeffs = m.moe_aux_loss_coeff;
  if (types.empty()) throw ConfigError("model.moe_router_load_balancing_type", "is empty; use none for no loss");
  if (types.size() != coeffs.size())
    throw ConfigError("model.moe_aux_loss_coeff", "has " + str(static_cast<int64_t>(coeffs.size())) +
                                                      " value(s) but model.moe_router_load_balancing_type has " +
                                                      str(static_cast<int64_t>(types.size())) +
                                                      "; give one coefficient per type");
  std::set<std::string> seen;
  for (const auto& t : types)
    if (!seen.insert(t).second)  // Strata: the loss would be counted twice under one log name
      throw ConfigError("model.moe_router_load_balancing_type", "lists '" + t + "' twice");
}

void check_experts(const ModelConfig& m) {
  if (m.moe_pad_expert_input_to_capacity && !m.moe_expert_capacity_factor)
    throw ConfigError("model.moe_pad_expert_input_to_capacity", "needs model.moe_expert_capacity_factor");
  if (m.moe_token_drop_policy != MoeTokenDropPolicy::Probs && !m.moe_expert_capacity_factor)  // Strata
    throw ConfigError("model.moe_token_drop_policy", std::string(to_string(m.moe_token_drop_policy)) +
                                                         " has no effect without model.moe_expert_capacity_factor "
                                                         "(null: dropless)");
  if (m.moe_apply_probs_on_input && m.moe_router_topk != 1)
    throw ConfigError("model.moe_apply_probs_on_input",
                      "needs model.moe_router_topk 1 (it is " + str(m.moe_router_topk) + ")");
  if (m.moe_shared_expert_gate && !m.moe_shared_expert_intermediate_size)
    throw ConfigError("model.moe_shared_expert_gate", "needs model.moe_shared_expert_intermediate_size");
  if (m.moe_shared_expert_intermediate_size && m.add_bias_linear)
    throw ConfigError("model.moe_shared_expert_intermediate_size",
                      "shared experts have no biases; set model.add_bias_linear to false");
}

}  // namespace

std::vector<int64_t> finalize_moe_config(ModelConfig& m) {
  if (!m.num_experts) {
    check_dense_model(m);
    return {};
  }
  if (!m.moe_ffn_hidden_size) m.moe_ffn_hidden_size = m.ffn_hidden_size;
  std::vector<int64_t> map = resolve_moe_layer_freq(m.moe_layer_freq, m.num_layers);
  check_router(m);
  check_load_balancing(m);
  check_experts(m);
  return map;
}

void validate_moe_layout(const ResolvedModelConfig& m, const ParallelConfig& p) {
  const int64_t tp = p.tensor_model_parallel_size, ep = p.expert_model_parallel_size;
  const int64_t etp = p.expert_tensor_parallel_size.value_or(tp);
  if (!m->num_experts) {
    if (ep > 1)
      throw ConfigError("parallel.expert_model_parallel_size",
                        str(ep) + " > 1 needs MoE layers (model.num_experts is null)");
    if (etp != tp)
      throw ConfigError("parallel.expert_tensor_parallel_size",
                        str(etp) + " only applies to MoE layers (model.num_experts is null); leave it null");
    return;
  }
  if (*m->num_experts % ep != 0)
    throw ConfigError(
        "model.num_experts",
        str(*m->num_experts) + " is not divisible by parallel.expert_model_parallel_size (" + str(ep) + ")");
  if (m.moe_ffn() % etp != 0)
    throw ConfigError(
        "model.moe_ffn_hidden_size",
        str(m.moe_ffn()) + " is not divisible by parallel.expert_tensor_parallel_size (" + str(etp) + ")");
  if (m->moe_shared_expert_intermediate_size && *m->moe_shared_expert_intermediate_size % tp != 0)
    throw ConfigError("model.moe_shared_expert_intermediate_size",
                      str(*m->moe_shared_expert_intermediate_size) +
                          " is not divisible by parallel.tensor_model_parallel_size (" + str(tp) + ")");
  if (m->add_bias_linear && etp != 1)
    throw ConfigError("parallel.expert_tensor_parallel_size",
                      str(etp) +
                          " > 1 with model.add_bias_linear: expert biases need expert_tensor_parallel_size 1; "
                          "set model.add_bias_linear to false or parallel.expert_tensor_parallel_size to 1");
  if (tp > 1 && !p.sequence_parallel)
    throw ConfigError("parallel.sequence_parallel",
                      "MoE layers with parallel.tensor_model_parallel_size " + str(tp) + " > 1 need it true");
}

}  // namespace strata
