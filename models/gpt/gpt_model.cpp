// GPTModel (see gpt_model.h): the shell with a TransformerBlock of this stage's layers.
// Reference: Megatron-Core models/gpt/gpt_model.py (GPTModel.__init__: TransformerBlock(spec)).
#include "models/gpt/gpt_model.h"

#include "core/error.h"
#include "models/layers/moe/moe_layer.h"
#include "models/model_manifest.h"

namespace strata {

namespace {
LanguageModelParts gpt_parts(const ResolvedModelConfig& cfg, const std::vector<layers::TransformerLayerSpec>& specs) {
  LanguageModelParts parts;
  parts.final_norm_prefix = "decoder.final_layernorm";
  parts.aux_loss_names = layers::moe::moe_loss_names(cfg);  // the MoE layers' router losses
  parts.make_block = [specs](const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                             int64_t first, int64_t count) -> std::unique_ptr<Block> {
    STRATA_CHECK(specs.empty() || static_cast<int64_t>(specs.size()) == cfg.num_layers, "GPTModel: ", specs.size(),
                 " layer specs for model.num_layers ", cfg.num_layers);
    std::vector<layers::TransformerLayerSpec> stage;
    for (int64_t i = first; i < first + count; ++i) {
      stage.push_back(specs.empty() ? layers::TransformerLayerSpec::full() : specs[static_cast<size_t>(i)]);
      if (cfg.is_moe_layer(i)) stage.back().mlp_kind = layers::MlpKind::MoE;  // model.moe_layer_freq
    }
    return std::make_unique<TransformerBlock>(first, stage, cfg, env, groups);
  };
  // Megatron get_gpt_mtp_block_spec: the MTP layer takes the decoder's last layer spec; one layer,
  // global number num_layers + k, named mtp.layers.{k}.mtp_model_layer (Megatron's module path; its
  // checkpoints name it transformer_layer: checkpoint_parameter_name, models/parameter_names.h).
  parts.make_mtp_layer = [specs](const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                                 int64_t k) -> std::unique_ptr<Block> {
    const int64_t last = cfg.num_layers - 1;
    layers::TransformerLayerSpec spec =
        specs.empty() ? layers::TransformerLayerSpec::full() : specs[static_cast<size_t>(last)];
    if (cfg.is_moe_layer(last)) spec.mlp_kind = layers::MlpKind::MoE;
    return std::make_unique<TransformerBlock>(cfg.num_layers + k, std::vector<layers::TransformerLayerSpec>{spec}, cfg,
                                              env, groups,
                                              std::vector<std::string>{mtp_model_layer_path(k)});
  };
  return parts;
}
}  // namespace

GPTModel::GPTModel(const ResolvedModelConfig& cfg, const GPTModelOptions& options, const ParallelGroups& groups)
    : LanguageModelShell(cfg, options, groups, gpt_parts(cfg, options.layer_specs)) {}

GPTModel::GPTModel(const ModelConfig& cfg, const GPTModelOptions& options, const ParallelGroups& groups)
    : GPTModel(ResolvedModelConfig(cfg), options, groups) {}

}  // namespace strata
