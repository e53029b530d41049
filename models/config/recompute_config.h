// The activation-recompute part of the `model` config section: the granularity and method enums,
// the names of recompute_modules, and the field table / rules that models/config/recompute_config.cpp
// implements. The members live in ModelConfig (models/config/model_config.h) with Megatron's names
// (TransformerConfig: recompute_granularity, recompute_method, recompute_num_layers,
// recompute_modules, distribute_saved_activations, moe_layer_recompute).
// Reference: megatron/core/transformer/transformer_config.py (__post_init__ recompute checks),
// megatron/training/arguments.py (validate_args: distribute_saved_activations, selective method).
#pragma once
#include <string>
#include <vector>

#include "core/config_table.h"

namespace strata {

struct ModelConfig;

enum class RecomputeGranularity { Full, Selective };
inline constexpr config::EnumName<RecomputeGranularity> kRecomputeGranularityNames[] = {
    {RecomputeGranularity::Full, "full"},
    {RecomputeGranularity::Selective, "selective"},
};

enum class RecomputeMethod { Uniform, Block };
inline constexpr config::EnumName<RecomputeMethod> kRecomputeMethodNames[] = {
    {RecomputeMethod::Uniform, "uniform"},
    {RecomputeMethod::Block, "block"},
};

const char* to_string(RecomputeGranularity g);
const char* to_string(RecomputeMethod m);

void add_recompute_fields(config::SectionFields<ModelConfig>& f);
// Rules within the model section (part of ResolvedModelConfig's resolution, after the MoE rules). The
// per-stage bound of recompute_num_layers needs the pipeline layout (training/config/config.cpp).
void finalize_recompute_config(ModelConfig& m);

// Selective recompute of one module (valid after finalize_recompute_config).
bool recompute_module(const ModelConfig& m, const std::string& module);
// The mode in words for reports (strata plan, bench train): "none", "full uniform 2",
// "full block 1", "selective mlp,moe".
std::string recompute_mode_text(const ModelConfig& m);

}  // namespace strata
