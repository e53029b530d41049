// The interface a layer stack (models/blocks/layer_stack.h) runs its layers through: one adapter
// per layer kind (models/config/layer_kind.h) — the TransformerLayer kinds (models/blocks/
// transformer_kinds.h), the Mamba2 layer (models/blocks/mamba_kind.h) and the mHC wrapper
// (models/blocks/hybrid_mhc_layer.h) implement it.
// Reference: megatron/core/models/hybrid/hybrid_block.py (HybridStack: one layer per symbol, each
// called with the same signature), transformer/transformer_block.py (the layer loop).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/blocks/block.h"
#include "models/config/layer_kind.h"

namespace strata {

namespace layers::moe {
class TopKRouter;
}

class StackLayer {
 public:
  // A layer's saved activations of one micro-batch (each kind derives its own).
  struct State {
    virtual ~State() = default;
  };
  virtual ~StackLayer() = default;

  // x: [s, b, h] ([s, b, n·h] with mHC) -> the same; cache: this layer's generation cache (no saved
  // state then); saves into *saved when not null; replay: a full-recompute replay
  // (models/blocks/recompute.h: per-step side effects such as the router's token counts are skipped).
  virtual Tensor forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                         std::unique_ptr<State>* saved, bool replay) = 0;
  // dy -> dx; adds parameter gradients into main_grad.
  virtual Tensor backward(State& saved, const Tensor& dy) = 0;
  virtual void collect(std::vector<Parameter*>& out) = 0;
  // This layer's generation cache (K/V for attention layers, the recurrent state for Mamba, empty
  // for the others).
  virtual layers::LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const = 0;
  virtual void end_of_step() {}
  virtual layers::moe::TopKRouter* moe_router() { return nullptr; }
  virtual const std::string& name() const = 0;  // its module path ("decoder.layers.N")
  virtual int64_t index() const = 0;            // the global layer number N
  virtual const LayerKind& kind() const = 0;
  char symbol() const { return kind().symbol; }
  // Selective mhc recompute (models/blocks/mhc_recompute.h; the layers holding mHC sites implement
  // them): drop / rebuild what the group replay recomputes. x undefined: the kept input. The base
  // class has no site: an internal error.
  virtual void mhc_release(State& saved, bool keep_input);
  virtual Tensor mhc_replay(State& saved, const Tensor& x);
  // Where a saving forward keeps the layer's input for its backward (its pre-norm's saved input
  // [T, h]); null when the layer does not expose it.
  virtual Tensor* kept_input(State&) { return nullptr; }
};

// The saved state of a stack layer as the kind's own type (an internal error otherwise).
template <typename Saved>
Saved& saved_as(StackLayer::State& state, const StackLayer& layer) {
  auto* sv = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(sv != nullptr, layer.name(), ": the saved state is not a ", layer.kind().name, " layer's");
  return *sv;
}

// Wraps a new saved state for a forward that saves (null: it does not).
template <typename Saved>
Saved* start_saving(std::unique_ptr<StackLayer::State>* saved) {
  if (!saved) return nullptr;
  auto s = std::make_unique<Saved>();
  Saved* out = s.get();
  *saved = std::move(s);
  return out;
}

// The layer a spec describes: the kind's own, wrapped in one mHC site when spec.mhc_wrapper.
std::unique_ptr<StackLayer> make_stack_layer(const StackLayerSpec& spec, const ResolvedModelConfig& cfg,
                                             const layers::LayerEnv& env, const ParallelGroups& groups);

}  // namespace strata
