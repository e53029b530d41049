// HybridModel (see hybrid_model.h): the shell with the hybrid model's parts (models/model_parts.h: a
// LayerStack of this stage's pattern symbols).
// Reference: megatron/core/models/hybrid/hybrid_model.py (HybridModel.__init__: select_pipeline_segment,
// HybridStack with post_layer_norm → final_norm).
#include "models/hybrid/hybrid_model.h"

#include "core/error.h"
#include "models/model_parts.h"

namespace strata {

HybridModel::HybridModel(const ResolvedModelConfig& cfg, const LanguageModelOptions& options, const ParallelGroups& groups)
    : LanguageModelShell(cfg, options, groups, hybrid_model_parts(cfg)) {}

HybridModel::HybridModel(const ModelConfig& cfg, const LanguageModelOptions& options, const ParallelGroups& groups)
    : HybridModel(ResolvedModelConfig(cfg), options, groups) {}

}  // namespace strata
