// Mixture-of-experts config (models/config/moe_config.h): the moe_layer_freq parser, the MoE field
// table and Megatron's MoE rules, each a ConfigError naming the fields.
// Reference: megatron/core/transformer/transformer_config.py (__post_init__: moe_ffn_hidden_size,
// expert bias score functions, top-1 post-softmax, group-limited routing, list lengths, capacity,
// padding, shared experts, bias with ETP), megatron/training/arguments.py (moe_freq_type,
// _eval_pattern, validate_args: expert parallelism), megatron/core/transformer/moe/router.py
// (sinkhorn, quantile balancing), experts.py (probs on input needs top-1), shared_experts.py (no
// bias), moe_layer.py (MoE with tp > 1 needs sequence parallelism in training).
#include "models/config/moe_config.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "models/config/layer_pattern.h"
#include "models/config/model_config.h"
#include "parallel/parallel_config.h"

namespace strata {

using config::ConfigError;

const char* to_string(MoeScoreFunction f) {
  return config::enum_to_string<MoeScoreFunction>(kMoeScoreFunctionNames, f);
}
const char* to_string(MoeRouterDtype d) {
  return config::enum_to_string<MoeRouterDtype>(kMoeRouterDtypeNames, d);
}
const char* to_string(MoeTokenDropPolicy p) {
  return config::enum_to_string<MoeTokenDropPolicy>(kMoeTokenDropPolicyNames, p);
}
const char* to_string(MoeTokenDispatcherType t) {
  return config::enum_to_string<MoeTokenDispatcherType>(kMoeTokenDispatcherTypeNames, t);
}

namespace {

constexpr const char* kFreqField = "model.moe_layer_freq";

// The per-layer 0/1 map, or the problem ("" when fine). num_layers < 0: syntax only.
std::string layer_freq_problem(const std::vector<std::string>& value, int64_t num_layers, std::vector<int64_t>& map) {
  map.clear();
  if (value.empty()) return "is empty; give an int N (every N-th layer is MoE), a 0/1 list or a pattern";
  // Megatron: layer i is an MoE layer iff i % N == 0.
  const LayerMapRule rule{"dense", "MoE", "layer i is an MoE layer iff i % N == 0", [](int64_t n, int64_t layers, std::vector<int64_t>& out) {
                            for (int64_t i = 0; i < layers; ++i) out.push_back(i % n == 0 ? 1 : 0);
                            return std::string();
                          }};
  return layer_map_problem(value, num_layers, rule, map);
}

const std::set<std::string> kLoadBalancingTypes = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none"};

std::string load_balancing_type_problem(const config::Value& v) {
  for (const auto& t : std::get<std::vector<std::string>>(v)) {
    if (t == "sinkhorn" || t == "quantile_balancing")
      return "'" + t + "' (Megatron's " + t +
             " routing) is not implemented in Strata; use aux_loss, seq_aux_loss, "
             "global_aux_loss or none";
    if (!kLoadBalancingTypes.count(t)) {
      std::string hint = config::closest_match(t, {kLoadBalancingTypes.begin(), kLoadBalancingTypes.end()});
      return "'" + t + "' is not one of aux_loss, seq_aux_loss, global_aux_loss, none" +
             (hint.empty() ? "" : "; did you mean '" + hint + "'?");
    }
  }
  return "";
}

// num_experts, moe_ffn_hidden_size, moe_layer_freq and the router's fields (topk, scores, groups,
// dtype, expert bias, load-balancing losses).
void add_router_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  using config::custom;
  using config::non_negative;
  using config::positive;
  f.add("num_experts", &M::num_experts,
        "Number of routed experts of each MoE layer (Megatron --num-experts). null: a dense model.")
      .check(positive())
      .architecture_defining();
  f.add("moe_ffn_hidden_size", &M::moe_ffn_hidden_size, "FFN hidden size of each routed expert. null: ffn_hidden_size.")
      .check(positive())
      .architecture_defining();
  f.add("moe_layer_freq", &M::moe_layer_freq,
        "Which layers are MoE: an int N (layer i is MoE iff i % N == 0; 1: every layer), a list of 0/1 per "
        "layer such as [0, 1, 1], or Megatron's pattern string such as \"([0]*1+[1]*3)\". A one-element list "
        "is read as the int N.")
      .check(custom("an int N >= 1, a 0/1 list of num_layers entries, or a pattern \"([a]*n+[b]*m...)\"",
                    [](const config::Value& v) {
                      std::vector<int64_t> map;
                      return layer_freq_problem(std::get<std::vector<std::string>>(v), -1, map);
                    }))
      .architecture_defining();
  f.add("moe_router_topk", &M::moe_router_topk, "Number of experts each token is routed to (k).").check(positive())
      .architecture_defining();
  f.add_enum("moe_router_score_function", &M::moe_router_score_function, kMoeScoreFunctionNames,
             "Router score function: softmax, sigmoid (DeepSeek-V3) or sqrtsoftplus.")
      .architecture_defining();
  f.add("moe_router_pre_softmax", &M::moe_router_pre_softmax,
        "With softmax scores: softmax over all experts before the top-k (weights not renormalized) instead "
        "of a softmax over the k selected logits. Required with moe_router_topk 1.")
      .architecture_defining();
  f.add("moe_router_num_groups", &M::moe_router_num_groups,
        "Group-limited routing: the experts split into this many equal groups. null: no groups.")
      .check(positive())
      .architecture_defining();
  f.add("moe_router_group_topk", &M::moe_router_group_topk,
        "Group-limited routing: groups selected per token (by the sum of their top k/group_topk scores). "
        "Needs moe_router_num_groups.")
      .check(positive())
      .architecture_defining();
  f.add("moe_router_topk_scaling_factor", &M::moe_router_topk_scaling_factor,
        "Factor applied to the routing weights after normalization. null: 1.")
      .check(positive())
      .architecture_defining();
  f.add_enum("moe_router_dtype", &M::moe_router_dtype, kMoeRouterDtypeNames,
             "Data type of the gating GEMM output and the routing math. null: the model's precision.");
  f.add("moe_router_enable_expert_bias", &M::moe_router_enable_expert_bias,
        "Aux-loss-free load balancing: a per-expert bias added to the scores for expert selection only, "
        "updated after each global batch from the tokens per expert (counted over tp x cp x dp) by "
        "moe_router_bias_update_rate x sign(mean - count); checkpointed, not trained. Needs sigmoid or "
        "sqrtsoftplus scores.")
      .architecture_defining();
  f.add("moe_router_bias_update_rate", &M::moe_router_bias_update_rate,
        "Step of the expert-bias update: bias += rate * sign(mean count - expert count).")
      .check(non_negative());
  f.add("moe_router_load_balancing_type", &M::moe_router_load_balancing_type,
        "Load-balancing loss(es): aux_loss (micro-batch, GShard/Switch), seq_aux_loss (per sequence, "
        "DeepSeek-V2), global_aux_loss (global batch) or none; one value or a list.")
      .check(custom("each aux_loss, seq_aux_loss, global_aux_loss or none", load_balancing_type_problem));
  f.add("moe_aux_loss_coeff", &M::moe_aux_loss_coeff,
        "Coefficient of each load-balancing loss: one value, or a list as long as "
        "moe_router_load_balancing_type. A loss with coefficient 0 is off.")
      .check(non_negative());
}

// z-loss, jitter, capacity and dropping, shared experts, dispatch and logging.
void add_expert_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  using config::in_range;
  using config::positive;
  f.add("moe_z_loss_coeff", &M::moe_z_loss_coeff, "Coefficient of the router z-loss (1e-3 is a start). null: off.")
      .check(positive());
  f.add("moe_input_jitter_eps", &M::moe_input_jitter_eps,
        "Multiply the router input by uniform noise in [1-eps, 1+eps] in training. null: off.")
      .check(in_range(0, false, 1, false));
  f.add("moe_expert_capacity_factor", &M::moe_expert_capacity_factor,
        "Expert capacity ceil(tokens*k/num_experts * factor); tokens over it are dropped. null: dropless.")
      .check(positive());
  f.add_enum("moe_token_drop_policy", &M::moe_token_drop_policy, kMoeTokenDropPolicyNames,
             "Which tokens an expert over capacity keeps: probs (the highest routing weights) or position "
             "(the earliest tokens).");
  f.add("moe_pad_expert_input_to_capacity", &M::moe_pad_expert_input_to_capacity,
        "Pad every expert's input to exactly its capacity. Needs moe_expert_capacity_factor.");
  f.add("moe_router_force_load_balancing", &M::moe_router_force_load_balancing,
        "Benchmark only: replace the router logits by random normal values (near-uniform load), with a "
        "straight-through gradient.");
  f.add("moe_shared_expert_intermediate_size", &M::moe_shared_expert_intermediate_size,
        "Total FFN size of the shared experts (number of shared experts x their size), run on every token "
        "and added to the routed output. null: no shared expert.")
      .check(positive())
      .architecture_defining();
  f.add("moe_shared_expert_gate", &M::moe_shared_expert_gate,
        "Scale the shared experts' output by a learned sigmoid gate. Needs moe_shared_expert_intermediate_size.")
      .architecture_defining();
  f.add("moe_apply_probs_on_input", &M::moe_apply_probs_on_input,
        "Apply the routing weight to the expert input instead of after the activation. Needs moe_router_topk 1.")
      .architecture_defining();
  f.add("moe_latent_size", &M::moe_latent_size,
        "Latent MoE (Nemotron-3 Super/Ultra): the routed experts work in this size. fc1_latent_proj "
        "(hidden -> latent) runs before the dispatch and fc2_latent_proj (latent -> hidden) after the combine, "
        "both duplicated over tensor-parallel ranks; the router and the shared experts see the hidden-size input. "
        "null: no latent projections.")
      .check(positive())
      .architecture_defining();
  f.add_enum("moe_token_dispatcher_type", &M::moe_token_dispatcher_type, kMoeTokenDispatcherTypeNames,
             "Token dispatcher: allgather (tokens all-gathered over the expert-parallel group), alltoall "
             "(uneven all-to-all of the routed tokens) or flex (Megatron's fused DeepEP/HybridEP dispatcher: the "
             "same routing; here it runs the alltoall dispatcher, with its numerics).");
  f.add("moe_grouped_gemm", &M::moe_grouped_gemm,
        "Accepted for Megatron launch scripts; changes nothing: the local experts always run through one "
        "grouped expert GEMM (kernels/moe.h: one cublasGemmGroupedBatchedEx call on CUDA).");
  f.add("moe_per_layer_logging", &M::moe_per_layer_logging,
        "Also log the load-balancing and z-losses of every MoE layer (TensorBoard moe/<loss>_layer_<i>, "
        "JSONL), not only their average over the MoE layers.");
}

}  // namespace

void add_moe_fields(config::SectionFields<ModelConfig>& f) {
  add_router_fields(f);
  add_expert_fields(f);
}


std::vector<int64_t> resolve_moe_layer_freq(const std::vector<std::string>& value, int64_t num_layers) {
  std::vector<int64_t> map;
  std::string problem = layer_freq_problem(value, num_layers, map);
  if (!problem.empty()) throw ConfigError(kFreqField, problem);
  return map;
}

bool ResolvedModelConfig::is_moe_layer(int64_t layer) const {
  if (!fields().num_experts) return false;
  STRATA_INTERNAL_ASSERT(layer >= 0 && layer < fields().num_layers, "layer ", layer, " out of range");
  return moe_layer_map_[static_cast<size_t>(layer)] == 1;
}

std::vector<MoeLoadBalancingLoss> ModelConfig::moe_load_balancing_losses() const {
  std::vector<MoeLoadBalancingLoss> out;
  if (!num_experts) return out;
  for (size_t i = 0; i < moe_router_load_balancing_type.size(); ++i) {
    const std::string& type = moe_router_load_balancing_type[i];
    double coeff = moe_aux_loss_coeff.at(i);  // the lengths match (finalize_moe_config)
    if (type != "none" && coeff > 0) out.push_back({type, coeff});
  }
  return out;
}

double ModelConfig::moe_load_balancing_coeff(const std::string& type) const {
  for (const MoeLoadBalancingLoss& loss : moe_load_balancing_losses())
    if (loss.type == type) return loss.coeff;
  return 0.0;
}

}  // namespace strata
