// HybridModel: Megatron-Core's HybridModel — the language-model shell (models/language_model_shell.h:
// embedding with learned absolute positions unless position_embedding_type is rope or none →
// block → final norm → output layer tied unless untie_embeddings_and_output_weights → fused
// vocab-parallel cross entropy) with a LayerStack (models/blocks/layer_stack.h) of this stage's part of
// model.hybrid_layer_pattern. RoPE applies in the `*` layers only (the only ones with attention).
// Output projections are initialised with N(0, σ/√(1.0·L)), L = the pattern's layers (GPT: 2.0·L).
// Parameter names are Megatron's HybridModel state-dict names: embedding.*, decoder.layers.N.*
// (N global; `*` self_attention.*, `-` mlp.*, `E` pre_mlp_layernorm.* + mlp.router/experts.*),
// decoder.final_norm.*, output_layer.weight.
// Reference: megatron/core/models/hybrid/hybrid_model.py, hybrid_block.py, hybrid_layer_specs.py,
// megatron/core/transformer/transformer_config.py (is_hybrid_model: output-layer init multiplier).
#pragma once
#include <memory>

#include "models/blocks/layer_stack.h"
#include "models/language_model_shell.h"

namespace strata {

class HybridModel : public LanguageModelShell {
 public:
  // From a resolved model section with hybrid_layer_pattern set (vocab_size must be set); or from a
  // section as written, resolved here (once, for this model).
  HybridModel(const ResolvedModelConfig& cfg, const LanguageModelOptions& options,
              const ParallelGroups& groups = ParallelGroups::single_process());
  HybridModel(const ModelConfig& cfg, const LanguageModelOptions& options,
              const ParallelGroups& groups = ParallelGroups::single_process());

  LayerStack& decoder() { return static_cast<LayerStack&>(block()); }
};

}  // namespace strata
