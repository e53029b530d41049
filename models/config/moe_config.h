// The mixture-of-experts part of the `model` config section: the option enums, the moe_layer_freq
// parser (an int, a 0/1 list or Megatron's pattern string, parsed without eval), and the
// declarations of the MoE field table and rules that models/config/moe_config.cpp implements.
// Reference: megatron/core/transformer/transformer_config.py (MoE fields, __post_init__ checks),
// megatron/training/arguments.py (_add_moe_args, moe_freq_type, _eval_pattern, validate_args MoE
// and expert-parallel checks), megatron/core/transformer/moe/ (router, experts, shared experts).
// The members themselves live in ModelConfig (models/config/model_config.h) with Megatron's names.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config_table.h"

namespace strata {

struct ModelConfig;
class ResolvedModelConfig;
struct ParallelConfig;

enum class MoeScoreFunction { Softmax, Sigmoid, SqrtSoftplus };
inline constexpr config::EnumName<MoeScoreFunction> kMoeScoreFunctionNames[] = {
    {MoeScoreFunction::Softmax, "softmax"},
    {MoeScoreFunction::Sigmoid, "sigmoid"},
    {MoeScoreFunction::SqrtSoftplus, "sqrtsoftplus"},
};

enum class MoeRouterDtype { Fp32, Fp64 };
inline constexpr config::EnumName<MoeRouterDtype> kMoeRouterDtypeNames[] = {
    {MoeRouterDtype::Fp32, "fp32"},
    {MoeRouterDtype::Fp64, "fp64"},
};

enum class MoeTokenDropPolicy { Probs, Position };
inline constexpr config::EnumName<MoeTokenDropPolicy> kMoeTokenDropPolicyNames[] = {
    {MoeTokenDropPolicy::Probs, "probs"},
    {MoeTokenDropPolicy::Position, "position"},
};

// flex: Megatron's fused dispatcher (DeepEP / HybridEP / NCCL EP kernels) routes the same tokens to
// the same experts as alltoall; on Strata's ranks it runs the all-to-all dispatcher, same numerics.
enum class MoeTokenDispatcherType { AllGather, AllToAll, Flex };
inline constexpr config::EnumName<MoeTokenDispatcherType> kMoeTokenDispatcherTypeNames[] = {
    {MoeTokenDispatcherType::AllGather, "allgather"},
    {MoeTokenDispatcherType::AllToAll, "alltoall"},
    {MoeTokenDispatcherType::Flex, "flex"},
};

const char* to_string(MoeScoreFunction f);
const char* to_string(MoeRouterDtype d);
const char* to_string(MoeTokenDropPolicy p);
const char* to_string(MoeTokenDispatcherType t);

// One active load-balancing loss: its type (aux_loss, seq_aux_loss, global_aux_loss) and its
// coefficient (> 0). Megatron: a loss is active iff its type is not `none` and its coefficient > 0.
struct MoeLoadBalancingLoss {
  std::string type;
  double coeff = 0;
};

// moe_layer_freq as decoded (a list of strings: one element for an int N or a pattern string,
// several for an explicit list) → one 0/1 entry per layer (1: MoE). An int N makes layer i an MoE
// layer iff i % N == 0 (Megatron). num_layers < 0 skips the length check (syntax only).
std::vector<int64_t> resolve_moe_layer_freq(const std::vector<std::string>& value, int64_t num_layers);

// Adds the MoE fields (num_experts, moe_*) to the model section's table.
void add_moe_fields(config::SectionFields<ModelConfig>& f);

// Resolves moe_ffn_hidden_size (after ffn_hidden_size) and returns the per-layer MoE map (empty for
// a dense model), and checks Megatron's MoE rules that need only the model section (router, load
// balancing, capacity, shared experts, MoE fields set on a dense model). Part of
// ResolvedModelConfig's resolution; throws config::ConfigError naming the fields.
std::vector<int64_t> finalize_moe_config(ModelConfig& m);

// The MoE rules that involve the parallel layout (experts over ep, expert FFN over etp, bias with
// etp, sequence parallelism with tp, ep/etp on a dense model), on a resolved section.
void validate_moe_layout(const ResolvedModelConfig& m, const ParallelConfig& p);

}  // namespace strata
