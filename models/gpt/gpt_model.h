// GPTModel: Megatron-Core's GPT — the language-model shell (models/language_model_shell.h:
// embedding → block → final norm → output layer tied to the word embeddings unless
// untie_embeddings_and_output_weights → fused vocab-parallel cross entropy) with a TransformerBlock
// of pre-norm transformer layers. By default every layer is a full attention + MLP layer; explicit
// layer specs (attention-only, MLP-only) build mixed stacks from the same layer.
// Parameter names are Megatron-Core GPTModel state-dict names (TE-fused layer norms):
// embedding.*, decoder.layers.N.*, decoder.final_layernorm.*, output_layer.weight.
// Reference: Megatron-Core models/gpt/gpt_model.py, models/gpt/gpt_layer_specs.py,
// transformer/transformer_block.py.
#pragma once
#include <memory>
#include <vector>

#include "models/blocks/transformer_block.h"
#include "models/language_model_shell.h"
#include "models/layers/layer_spec.h"

namespace strata {

struct GPTModelOptions : LanguageModelOptions {
  // One spec per layer of the whole model (global order); empty: every layer attention + MLP.
  std::vector<layers::TransformerLayerSpec> layer_specs;
};

class GPTModel : public LanguageModelShell {
 public:
  // From a resolved model section (vocab_size must be set) and explicit options; or from a section
  // as written, resolved here (once, for this model).
  GPTModel(const ResolvedModelConfig& cfg, const GPTModelOptions& options,
           const ParallelGroups& groups = ParallelGroups::single_process());
  GPTModel(const ModelConfig& cfg, const GPTModelOptions& options,
           const ParallelGroups& groups = ParallelGroups::single_process());

  TransformerBlock& decoder() { return static_cast<TransformerBlock&>(block()); }
  // Local layer i (global index first_layer() + i).
  layers::TransformerLayer& layer(size_t i) { return decoder().layer(i); }
  size_t num_local_layers() const { return static_cast<size_t>(options().num_layers); }
};

}  // namespace strata
