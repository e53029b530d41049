// HybridModel (see hybrid_model.h): the shell with a HybridStack of this stage's pattern symbols.
// Reference: megatron/core/models/hybrid/hybrid_model.py (HybridModel.__init__: select_pipeline_segment,
// HybridStack with post_layer_norm → final_norm).
#include "models/hybrid/hybrid_model.h"

#include "core/error.h"
#include "models/hybrid/hybrid_pattern.h"
#include "models/layers/moe/moe_layer.h"
#include "models/model_manifest.h"

namespace strata {

namespace {
LanguageModelParts hybrid_parts(const ResolvedModelConfig& cfg) {
  STRATA_CHECK(cfg.is_hybrid(), "HybridModel: model.hybrid_layer_pattern is not set");
  LanguageModelParts parts;
  parts.final_norm_prefix = "decoder.final_norm";
  parts.aux_loss_names = layers::moe::moe_loss_names(cfg);  // the E layers' router losses
  parts.make_block = [](const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                        int64_t first, int64_t count) -> std::unique_ptr<Block> {
    const hybrid::HybridPattern& p = cfg.hybrid_pattern();
    STRATA_CHECK(first >= 0 && count >= 0 && first + count <= p.num_layers(), "HybridModel: layers [", first, ", ",
                 first + count, ") outside the ", p.num_layers(), " layers of model.hybrid_layer_pattern");
    return std::make_unique<HybridStack>(first, p.layers.substr(static_cast<size_t>(first), static_cast<size_t>(count)),
                                         cfg, env, groups);
  };
  // Megatron MultiTokenPredictionLayer (hybrid path): a nested HybridStack of the MTP pattern
  // (pre/post_process, no final norm of its own), layers mtp.layers.{k}.mtp_model_layer.layers.{j},
  // global numbers num_layers + k·P + j.
  parts.make_mtp_layer = [](const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                            int64_t k) -> std::unique_ptr<Block> {
    const hybrid::HybridPattern& p = cfg.hybrid_pattern();
    STRATA_CHECK(!p.mtp.empty(), "HybridModel: model.mtp_num_layers needs '/' patterns in model.hybrid_layer_pattern");
    return std::make_unique<HybridStack>(cfg.num_layers + k * static_cast<int64_t>(p.mtp.size()), p.mtp, cfg, env,
                                         groups, mtp_model_layer_path(k) + ".layers.");
  };
  return parts;
}
}  // namespace

HybridModel::HybridModel(const ResolvedModelConfig& cfg, const LanguageModelOptions& options, const ParallelGroups& groups)
    : LanguageModelShell(cfg, options, groups, hybrid_parts(cfg)) {}

HybridModel::HybridModel(const ModelConfig& cfg, const LanguageModelOptions& options, const ParallelGroups& groups)
    : HybridModel(ResolvedModelConfig(cfg), options, groups) {}

}  // namespace strata
