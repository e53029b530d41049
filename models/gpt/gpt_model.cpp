// GPTModel (see gpt_model.h): the shell with GPT's parts (models/model_parts.h: a LayerStack of this
// stage's layers). Reference: Megatron-Core models/gpt/gpt_model.py (GPTModel.__init__: TransformerBlock(spec)).
#include "models/gpt/gpt_model.h"

#include "core/error.h"
#include "models/blocks/transformer_kinds.h"
#include "models/model_parts.h"

namespace strata {

GPTModel::GPTModel(const ResolvedModelConfig& cfg, const GPTModelOptions& options, const ParallelGroups& groups)
    : LanguageModelShell(cfg, options, groups, gpt_model_parts(cfg, options.layer_symbols)) {}

GPTModel::GPTModel(const ModelConfig& cfg, const GPTModelOptions& options, const ParallelGroups& groups)
    : GPTModel(ResolvedModelConfig(cfg), options, groups) {}

layers::TransformerLayer& GPTModel::layer(size_t i) {
  auto* t = dynamic_cast<TransformerStackLayer*>(&decoder().layer(i));
  STRATA_INTERNAL_ASSERT(t != nullptr, decoder().layer(i).name(), " is not a TransformerLayer kind");
  return t->layer();
}

}  // namespace strata
