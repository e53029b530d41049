// The GPT and hybrid models' parts over the shell (see model_parts.h).
// Reference: megatron/core/models/gpt/gpt_model.py, gpt_layer_specs.py (get_gpt_mtp_block_spec),
// megatron/core/models/hybrid/hybrid_model.py (select_pipeline_segment, HybridStack).
#include "models/model_parts.h"

#include "core/error.h"
#include "models/blocks/layer_stack.h"
#include "models/config/model_stacks.h"

namespace strata {

LanguageModelParts gpt_model_parts(const ResolvedModelConfig& cfg, const std::string& layer_symbols) {
  LanguageModelParts parts;
  parts.final_norm_prefix = "decoder.final_layernorm";
  parts.aux_loss_names = model_layer_loss_names(cfg, layer_symbols);  // the MoE layers' router losses
  parts.make_block = [layer_symbols](const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
                                     const ParallelGroups& groups, int64_t first,
                                     int64_t count) -> std::unique_ptr<Block> {
    return std::make_unique<LayerStack>(first, decoder_stack_specs(cfg, first, count, layer_symbols), cfg, env, groups);
  };
  // Megatron get_gpt_mtp_block_spec: the MTP layer takes the decoder's last layer spec; one layer,
  // global number num_layers + k, named mtp.layers.{k}.mtp_model_layer (Megatron's module path; its
  // checkpoints name it transformer_layer: checkpoint_parameter_name, models/parameter_names.h).
  parts.make_mtp_layer = [layer_symbols](const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
                                         const ParallelGroups& groups, int64_t k) -> std::unique_ptr<Block> {
    return std::make_unique<LayerStack>(cfg->num_layers + k, mtp_stack_specs(cfg, k, layer_symbols), cfg, env, groups,
                                        /*full_recompute=*/false);
  };
  return parts;
}

LanguageModelParts hybrid_model_parts(const ResolvedModelConfig& cfg) {
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

LanguageModelParts model_parts(const ResolvedModelConfig& cfg) {
  return cfg->is_hybrid() ? hybrid_model_parts(cfg) : gpt_model_parts(cfg, "");
}

}  // namespace strata
