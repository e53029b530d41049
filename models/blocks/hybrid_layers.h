// The layers of a hybrid stack behind one small interface, one adapter per layer kind: `*`, `-`
// and `E` are the TransformerLayer assembled from the attention-only, MLP-only and MoE-only specs
// (Megatron's hybrid_stack_spec: attention_layer = TransformerLayer without MLP, mlp_layer =
// MLPLayer, moe_layer = MoETransformerLayer with its own pre_mlp_layernorm); `M` is the MambaLayer
// (models/layers/mamba_layer.h). A new kind is one more adapter and one case in make_hybrid_layer.
// Reference: megatron/core/models/hybrid/hybrid_layer_specs.py (hybrid_stack_spec),
// hybrid_block.py (HybridStack.__init__: one layer per symbol).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/block.h"
#include "models/layers/mamba_layer.h"
#include "models/layers/transformer_layer.h"
#include "models/model_config.h"
#include "parallel/process_group.h"

namespace strata {

class HybridLayer {
 public:
  // A layer's saved activations of one micro-batch (each kind derives its own).
  struct State {
    virtual ~State() = default;
  };
  virtual ~HybridLayer() = default;

  // x: [s, b, h] -> [s, b, h]; cache: this layer's generation cache (no saved state then);
  // saves into *saved when not null; replay: a full-recompute replay (models/blocks/recompute.h:
  // per-step side effects such as the router's token counts are skipped).
  virtual Tensor forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                         std::unique_ptr<State>* saved, bool replay) = 0;
  // dy -> dx; adds parameter gradients into main_grad.
  virtual Tensor backward(State& saved, const Tensor& dy) = 0;
  virtual void collect(std::vector<Parameter*>& out) = 0;
  // This layer's generation cache (K/V for attention layers, empty for the others).
  virtual layers::LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const = 0;
  virtual void end_of_step() {}
  virtual layers::moe::TopKRouter* moe_router() { return nullptr; }
  virtual const std::string& name() const = 0;  // "decoder.layers.N" (N global)
  virtual int64_t index() const = 0;            // the global layer number N
  virtual char symbol() const = 0;              // its pattern symbol
  // Selective mhc recompute (models/blocks/mhc_recompute.h; the mHC wrapper implements them):
  // drop / rebuild what the group replay recomputes. The base class has no site: an internal error.
  virtual void mhc_release(State& saved, bool keep_input);
  virtual Tensor mhc_replay(State& saved, const Tensor& x);
  // Where a saving forward keeps the layer's input for its backward (its pre-norm's saved input
  // [T, h]); null when the layer does not expose it.
  virtual Tensor* kept_input(State&) { return nullptr; }
};

// `*`, `-`, `E`: a TransformerLayer from the matching spec.
class TransformerHybridLayer : public HybridLayer {
 public:
  TransformerHybridLayer(char symbol, int64_t index, const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
                         const ParallelGroups& groups, const std::string& name = {});
  Tensor forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                 std::unique_ptr<State>* saved, bool replay) override;
  Tensor backward(State& saved, const Tensor& dy) override;
  void collect(std::vector<Parameter*>& out) override { layer_.collect(out); }
  layers::LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const override;
  void end_of_step() override { layer_.end_of_step(); }
  layers::moe::TopKRouter* moe_router() override { return layer_.moe_router(); }
  const std::string& name() const override { return layer_.name(); }
  int64_t index() const override { return layer_.index(); }
  char symbol() const override { return symbol_; }
  layers::TransformerLayer& layer() { return layer_; }

 private:
  struct Saved;
  char symbol_;
  layers::TransformerLayer layer_;
};

// `M`: the MambaLayer (mixer with its fused pre-norm; recurrent state cache).
class MambaHybridLayer : public HybridLayer {
 public:
  MambaHybridLayer(int64_t index, const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                   const std::string& name = {})
      : layer_(index, cfg, env, groups, name) {}
  Tensor forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                 std::unique_ptr<State>* saved, bool replay) override;
  Tensor backward(State& saved, const Tensor& dy) override;
  void collect(std::vector<Parameter*>& out) override { layer_.collect(out); }
  layers::LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType, Device) const override {
    return layer_.make_cache(batch, max_seq);
  }
  void end_of_step() override { layer_.end_of_step(); }
  const std::string& name() const override { return layer_.name(); }
  int64_t index() const override { return layer_.index(); }
  char symbol() const override { return 'M'; }
  Tensor* kept_input(State& saved) override;
  layers::MambaLayer& layer() { return layer_; }

 private:
  struct Saved;
  layers::MambaLayer layer_;
};

// The TransformerLayer spec of a transformer symbol (`*`, `-`, `E`); an internal error otherwise.
layers::TransformerLayerSpec hybrid_transformer_spec(char symbol);

// The layer of `symbol` at global layer `index` (name: its canonical prefix when not
// "decoder.layers.{index}"). A symbol this build lacks is a ConfigError naming
// model.hybrid_layer_pattern (config validation refuses it first).
std::unique_ptr<HybridLayer> make_hybrid_layer(char symbol, int64_t index, const ResolvedModelConfig& cfg,
                                               const layers::LayerEnv& env, const ParallelGroups& groups,
                                               const std::string& name = {});

}  // namespace strata
