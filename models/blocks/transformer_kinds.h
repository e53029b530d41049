// The layer kinds built from one TransformerLayer (models/layers/transformer_layer.h), each a
// TransformerLayerSpec: `T` GPT's layer (attention + MLP slot; Megatron's GPT layer spec, no hybrid
// symbol), `*` attention only, `-` MLP only, `E` MoE only with its own pre_mlp_layernorm (Megatron's
// hybrid_stack_spec: attention_layer, mlp_layer, moe_layer). A place's MoE flag (GPT:
// model.moe_layer_freq) fills the MLP slot of `T` and `-` with the MoE layer.
// Reference: megatron/core/models/gpt/gpt_layer_specs.py, models/hybrid/hybrid_layer_specs.py.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "models/blocks/stack_layer.h"
#include "models/layers/transformer_layer.h"

namespace strata {

class TransformerStackLayer : public StackLayer {
 public:
  TransformerStackLayer(const LayerKind& kind, const LayerPlace& place, const ResolvedModelConfig& cfg,
                        const layers::LayerEnv& env, const ParallelGroups& groups);
  Tensor forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache, std::unique_ptr<State>* saved,
                 bool replay) override;
  Tensor backward(State& saved, const Tensor& dy) override;
  void collect(std::vector<Parameter*>& out) override { layer_.collect(out); }
  layers::LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const override;
  void end_of_step() override { layer_.end_of_step(); }
  layers::moe::TopKRouter* moe_router() override { return layer_.moe_router(); }
  const std::string& name() const override { return layer_.name(); }
  int64_t index() const override { return layer_.index(); }
  const LayerKind& kind() const override { return kind_; }
  // mHC sites inside the layer (GPT: one per branch).
  void mhc_release(State& saved, bool keep_input) override;
  Tensor mhc_replay(State& saved, const Tensor& x) override;
  layers::TransformerLayer& layer() { return layer_; }
  // The layer's saved state inside a stack state of this kind.
  static layers::TransformerLayer::Saved& saved_layer(State& saved, const StackLayer& layer);

 private:
  struct Saved;
  const LayerKind& kind_;
  layers::TransformerLayer layer_;
};

// The TransformerLayer spec of a transformer kind's symbol at a place (MoE slot when place.moe).
layers::TransformerLayerSpec transformer_kind_spec(char symbol, const LayerPlace& place);

// Registers `T`, `*`, `-` and `E`.
void register_transformer_kinds(LayerKindRegistry& registry);

}  // namespace strata
