// GPTModel: Megatron-Core's GPT — the language-model shell (models/language_model_shell.h:
// embedding → block → final norm → output layer tied to the word embeddings unless
// untie_embeddings_and_output_weights → fused vocab-parallel cross entropy) with a LayerStack
// (models/blocks/layer_stack.h) of pre-norm transformer layers. By default every layer is a full
// attention + MLP layer (`T`); explicit layer symbols build mixed stacks of any registered layer
// kind (models/config/layer_kind.h).
// Parameter names are Megatron-Core GPTModel state-dict names (TE-fused layer norms):
// embedding.*, decoder.layers.N.*, decoder.final_layernorm.*, output_layer.weight.
// Reference: Megatron-Core models/gpt/gpt_model.py, models/gpt/gpt_layer_specs.py,
// transformer/transformer_block.py.
#pragma once
#include <memory>
#include <vector>

#include <string>

#include "models/blocks/layer_stack.h"
#include "models/language_model_shell.h"
#include "models/layers/transformer_layer.h"

namespace strata {

struct GPTModelOptions : LanguageModelOptions {
  // One layer-kind symbol per layer of the whole model (global order; models/config/layer_kind.h: `T`
  // attention + MLP, `*` attention only, `-` MLP only, …); empty: every layer `T`.
  std::string layer_symbols;
};

class GPTModel : public LanguageModelShell {
 public:
  // From a resolved model section (vocab_size must be set) and explicit options; or from a section
  // as written, resolved here (once, for this model).
  GPTModel(const ResolvedModelConfig& cfg, const GPTModelOptions& options,
           const ParallelGroups& groups = ParallelGroups::single_process());
  GPTModel(const ModelConfig& cfg, const GPTModelOptions& options,
           const ParallelGroups& groups = ParallelGroups::single_process());

  LayerStack& decoder() { return static_cast<LayerStack&>(block()); }
  // Local layer i (global index first_layer() + i), a TransformerLayer kind (an internal error otherwise).
  layers::TransformerLayer& layer(size_t i);
  size_t num_local_layers() const { return static_cast<size_t>(options().num_layers); }
};

}  // namespace strata
