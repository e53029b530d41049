// Multi-token-prediction config (models/config/mtp_config.h). Each error is a ConfigError naming the field.
// Reference: megatron/training/arguments.py (_add_mtp_args, validate_args MTP block).
#include "models/config/mtp_config.h"

#include <string>

#include "models/config/hybrid_pattern.h"
#include "models/config/model_config.h"
#include "parallel/parallel_config.h"

namespace strata {

using config::ConfigError;

void add_mtp_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  f.add("mtp_num_layers", &M::mtp_num_layers,
        "Multi-token prediction depths D (DeepSeek-V3 MTP modules on the last pipeline stage, each predicting "
        "one token further ahead). null: no MTP. Hybrid models: inferred from the '/' patterns of "
        "hybrid_layer_pattern (docs/mtp.md).")
      .check(config::positive())
      .architecture_defining();
  f.add("mtp_loss_scaling_factor", &M::mtp_loss_scaling_factor,
        "Weight lambda of the MTP losses: the objective adds lambda / mtp_num_layers times each depth's loss.")
      .check(config::non_negative());
  f.add("mtp_use_repeated_layer", &M::mtp_use_repeated_layer,
        "One shared MTP module (enorm, hnorm, eh_proj, transformer layer, final norm) applied mtp_num_layers times.")
      .architecture_defining();
  f.add("mtp_detach_heads", &M::mtp_detach_heads,
        "Detach the MTP inputs (decoder output, embeddings) and the output weight: the MTP loss trains only the "
        "MTP modules, not the trunk.");
}

void finalize_mtp_config(ModelConfig& m) {
  if (!m.mtp_num_layers) {
    if (m.mtp_use_repeated_layer)
      throw ConfigError("model.mtp_use_repeated_layer", "needs model.mtp_num_layers (multi-token prediction is off)");
    if (m.mtp_detach_heads)
      throw ConfigError("model.mtp_detach_heads", "needs model.mtp_num_layers (multi-token prediction is off)");
    return;
  }
  // Megatron validate_args: MTP rolls the input ids but not learned position ids.
  if (m.position_embedding_type == PositionEmbeddingType::LearnedAbsolute)
    throw ConfigError("model.position_embedding_type",
                      "learned_absolute is not supported with model.mtp_num_layers (multi-token prediction needs "
                      "rope or none, as in Megatron-LM)");
  // Megatron MultiTokenPredictionLayer._checkpointed_forward: one checkpoint per depth.
  if (m.recompute_granularity == RecomputeGranularity::Full && m.recompute_method == RecomputeMethod::Uniform &&
      m.recompute_num_layers && *m.recompute_num_layers != 1)
    throw ConfigError("model.recompute_num_layers",
                      std::to_string(*m.recompute_num_layers) +
                          ": recompute_method uniform with model.mtp_num_layers needs 1 (each MTP depth is one "
                          "checkpoint, as Megatron-LM requires)");
}

int64_t mtp_layers_per_depth(const ResolvedModelConfig& m) {
  if (!m->mtp_num_layers) return 0;
  if (!m->is_hybrid()) return 1;
  return static_cast<int64_t>(m.hybrid_pattern().mtp.size());
}

int64_t num_layers_with_mtp(const ResolvedModelConfig& m) { return m->num_layers + m->mtp_depths() * mtp_layers_per_depth(m); }

int64_t mtp_moe_layers(const ResolvedModelConfig& m) {
  if (!m->mtp_num_layers || !m->is_moe()) return 0;
  int64_t per_depth = 0;
  if (m->is_hybrid()) {
    for (char c : m.hybrid_pattern().mtp) per_depth += c == hybrid::kMoe ? 1 : 0;
  } else {
    per_depth = m.is_moe_layer(m->num_layers - 1) ? 1 : 0;  // the MTP layer takes the last layer's spec
  }
  return m->mtp_use_repeated_layer ? per_depth : per_depth * m->mtp_depths();
}

void validate_mtp_layout(const ModelConfig& m, const ParallelConfig& p) {
  if (!m.mtp_num_layers) return;
  if (p.context_parallel_size > 1)
    throw ConfigError("model.mtp_num_layers",
                      "multi-token prediction with parallel.context_parallel_size " +
                          std::to_string(p.context_parallel_size) +
                          " > 1 is not supported (Megatron-LM lists context parallelism as unsupported for MTP)");
}

}  // namespace strata
