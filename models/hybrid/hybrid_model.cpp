// HybridModel (see hybrid_model.h): the shell with a LayerStack of this stage's pattern symbols.
// Reference: megatron/core/models/hybrid/hybrid_model.py (HybridModel.__init__: select_pipeline_segment,
// HybridStack with post_layer_norm → final_norm).
#include "models/hybrid/hybrid_model.h"

#include "core/error.h"
#include "models/config/model_stacks.h"

namespace strata {

namespace {
LanguageModelParts hybrid_parts(const ResolvedModelConfig& cfg) {
  STRATA_CHECK(cfg->is_hybrid(), "HybridModel: model.hybrid_layer_pattern is not set");
  LanguageModelParts parts;
  parts.final_norm_prefix = "decoder.final_norm";
  parts.aux_loss_names = model_layer_loss_names(cfg);  // the E layers' router losses
  parts.make_block = [](const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                        int64_t first, int64_t count) -> std::unique_ptr<Block> {
    return std::make_unique<LayerStack>(first, decoder_stack_specs(cfg, first, count), cfg, env, groups);
  };
  // Megatron MultiTokenPredictionLayer (hybrid path): a nested stack of the MTP pattern
  // (pre/post_process, no final norm of its own), layers mtp.layers.{k}.mtp_model_layer.layers.{j},
  // global numbers num_layers + k·P + j.
  parts.make_mtp_layer = [](const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                            int64_t k) -> std::unique_ptr<Block> {
    const std::vector<StackLayerSpec> specs = mtp_stack_specs(cfg, k);
    return std::make_unique<LayerStack>(specs.front().place.index, specs, cfg, env, groups, /*full_recompute=*/false);
  };
  return parts;
}
}  // namespace

HybridModel::HybridModel(const ResolvedModelConfig& cfg, const LanguageModelOptions& options, const ParallelGroups& groups)
    : LanguageModelShell(cfg, options, groups, hybrid_parts(cfg)) {}

HybridModel::HybridModel(const ModelConfig& cfg, const LanguageModelOptions& options, const ParallelGroups& groups)
    : HybridModel(ResolvedModelConfig(cfg), options, groups) {}

}  // namespace strata
