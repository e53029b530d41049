// GPTModel (see gpt_model.h): the shell with a LayerStack of this stage's layers.
// Reference: Megatron-Core models/gpt/gpt_model.py (GPTModel.__init__: TransformerBlock(spec)).
#include "models/gpt/gpt_model.h"

#include "core/error.h"
#include "models/blocks/transformer_kinds.h"
#include "models/config/model_stacks.h"

namespace strata {

namespace {
LanguageModelParts gpt_parts(const ResolvedModelConfig& cfg, const std::string& symbols) {
  LanguageModelParts parts;
  parts.final_norm_prefix = "decoder.final_layernorm";
  parts.aux_loss_names = model_layer_loss_names(cfg, symbols);  // the MoE layers' router losses
  parts.make_block = [symbols](const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                               int64_t first, int64_t count) -> std::unique_ptr<Block> {
    return std::make_unique<LayerStack>(first, decoder_stack_specs(cfg, first, count, symbols), cfg, env, groups);
  };
  // Megatron get_gpt_mtp_block_spec: the MTP layer takes the decoder's last layer spec; one layer,
  // global number num_layers + k, named mtp.layers.{k}.mtp_model_layer (Megatron's module path; its
  // checkpoints name it transformer_layer: checkpoint_parameter_name, models/parameter_names.h).
  parts.make_mtp_layer = [symbols](const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
                                   const ParallelGroups& groups, int64_t k) -> std::unique_ptr<Block> {
    return std::make_unique<LayerStack>(cfg->num_layers + k, mtp_stack_specs(cfg, k, symbols), cfg, env, groups,
                                        /*full_recompute=*/false);
  };
  return parts;
}
}  // namespace

GPTModel::GPTModel(const ResolvedModelConfig& cfg, const GPTModelOptions& options, const ParallelGroups& groups)
    : LanguageModelShell(cfg, options, groups, gpt_parts(cfg, options.layer_symbols)) {}

GPTModel::GPTModel(const ModelConfig& cfg, const GPTModelOptions& options, const ParallelGroups& groups)
    : GPTModel(ResolvedModelConfig(cfg), options, groups) {}

layers::TransformerLayer& GPTModel::layer(size_t i) {
  auto* t = dynamic_cast<TransformerStackLayer*>(&decoder().layer(i));
  STRATA_INTERNAL_ASSERT(t != nullptr, decoder().layer(i).name(), " is not a TransformerLayer kind");
  return t->layer();
}

}  // namespace strata
