// The TopKRouter's options, with Megatron-Core's TransformerConfig field names and defaults, and
// their checks. The MoE layer fills RouterOptions from the model config; the router itself reads
// no config. An unset optional (Megatron's None) is std::nullopt.
// Reference: megatron/core/transformer/transformer_config.py (moe_router_* fields and their
// __post_init__ checks), megatron/core/transformer/moe/router.py (TopKRouter.__init__).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::layers::moe {

enum class ScoreFunction { Softmax, Sigmoid, SqrtSoftplus };
enum class TokenDropPolicy { Probs, Position };

// Megatron's moe_router_dtype: None (the input dtype), "fp32" or "fp64".
enum class RouterDType { Input, Fp32, Fp64 };

struct RouterOptions {
  int64_t num_moe_experts = 0;   // E (Megatron's --num-experts)
  int64_t hidden_size = 0;       // H
  int64_t moe_router_topk = 2;   // k
  ScoreFunction moe_router_score_function = ScoreFunction::Softmax;
  bool moe_router_pre_softmax = false;
  std::optional<int64_t> moe_router_num_groups;   // G
  std::optional<int64_t> moe_router_group_topk;   // g
  std::optional<double> moe_router_topk_scaling_factor;
  RouterDType moe_router_dtype = RouterDType::Input;
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  // Megatron's moe_router_load_balancing_type / moe_aux_loss_coeff (a value or matching lists):
  // "aux_loss", "seq_aux_loss", "global_aux_loss" or "none"; a loss is active iff its coeff > 0.
  std::vector<std::string> moe_router_load_balancing_type{"aux_loss"};
  std::vector<double> moe_aux_loss_coeff{0.0};
  std::optional<double> moe_z_loss_coeff;
  std::optional<double> moe_input_jitter_eps;
  std::optional<double> moe_expert_capacity_factor;
  TokenDropPolicy moe_token_drop_policy = TokenDropPolicy::Probs;
  bool moe_pad_expert_input_to_capacity = false;
  bool moe_router_force_load_balancing = false;  // benchmark only
  double init_method_std = 0.02;                 // router weight init N(0, std)

  // The coefficient of one aux-loss type ("aux_loss", "seq_aux_loss", "global_aux_loss"); 0 when
  // the type is not listed (Megatron's get_aux_loss_coeff).
  double aux_loss_coeff(const std::string& type) const;
  bool aux_loss_enabled() const;
  bool uses_scores_sum() const { return moe_router_score_function != ScoreFunction::Softmax; }
};

// Throws a config error naming the fields of the first invalid combination Megatron rejects
// (softmax with expert bias, post-softmax top-1, k > E, list lengths, unknown load-balancing
// types, capacity/jitter ranges). Runs before anything is allocated. The router groups are checked
// in one place, the model section's rules (models/config/moe_rules.cpp), before any router exists.
void check_router_options(const RouterOptions& o);

const char* score_function_name(ScoreFunction f);

}  // namespace strata::layers::moe
