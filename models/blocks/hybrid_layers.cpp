// The hybrid stack's layer adapters and factory (see hybrid_layers.h).
// Reference: megatron/core/models/hybrid/hybrid_layer_specs.py, hybrid_block.py.
#include "models/blocks/hybrid_layers.h"

#include "core/config_table.h"
#include "core/error.h"

namespace strata {

struct TransformerHybridLayer::Saved : HybridLayer::State {
  layers::TransformerLayer::Saved layer;
};

layers::TransformerLayerSpec hybrid_transformer_spec(char symbol) {
  switch (symbol) {
    case '*': return layers::TransformerLayerSpec::attention_only();
    case '-': return layers::TransformerLayerSpec::mlp_only();
    case 'E': return layers::TransformerLayerSpec::moe_only();
    default: STRATA_INTERNAL_ASSERT(false, "hybrid_transformer_spec: '", symbol, "' is not a transformer symbol");
  }
  return {};
}

TransformerHybridLayer::TransformerHybridLayer(char symbol, int64_t index, const ResolvedModelConfig& cfg,
                                               const layers::LayerEnv& env, const ParallelGroups& groups,
                                               const std::string& name)
    : symbol_(symbol), layer_(index, cfg, env, groups, hybrid_transformer_spec(symbol), name) {}

Tensor TransformerHybridLayer::forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                                       std::unique_ptr<State>* saved, bool replay) {
  Saved* sv = nullptr;
  if (saved) {
    auto s = std::make_unique<Saved>();
    sv = s.get();
    *saved = std::move(s);
  }
  return layer_.forward(x, run.keys, run.position_offset, cache, sv ? &sv->layer : nullptr, run.aux, replay);
}

Tensor TransformerHybridLayer::backward(State& saved, const Tensor& dy) {
  auto* sv = dynamic_cast<Saved*>(&saved);
  STRATA_INTERNAL_ASSERT(sv != nullptr, name(), ": the saved state is not a transformer layer's");
  return layer_.backward(sv->layer, dy);
}

layers::LayerKVCache TransformerHybridLayer::make_cache(int64_t batch, int64_t max_seq, DType dtype,
                                                        Device device) const {
  layers::LayerKVCache lc;
  if (layer_.has_attention()) {
    const auto& a = layer_.self_attention();
    lc.k = Tensor::zeros({max_seq, batch, a.groups(), a.head_dim()}, dtype, device);
    lc.v = Tensor::zeros({max_seq, batch, a.groups(), a.head_dim()}, dtype, device);
  }
  return lc;
}

struct MambaHybridLayer::Saved : HybridLayer::State {
  layers::MambaLayer::Saved layer;
};

Tensor MambaHybridLayer::forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                                 std::unique_ptr<State>* saved, bool /*replay: a Mamba layer has no per-step state*/) {
  Saved* sv = nullptr;
  if (saved) {
    auto s = std::make_unique<Saved>();
    sv = s.get();
    *saved = std::move(s);
  }
  return layer_.forward(x, run.keys, run.position_offset, cache, sv ? &sv->layer : nullptr, run.aux);
}

Tensor MambaHybridLayer::backward(State& saved, const Tensor& dy) {
  auto* sv = dynamic_cast<Saved*>(&saved);
  STRATA_INTERNAL_ASSERT(sv != nullptr, name(), ": the saved state is not a Mamba layer's");
  return layer_.backward(sv->layer, dy);
}

void HybridLayer::mhc_release(State&, bool) {
  STRATA_INTERNAL_ASSERT(false, name(), ": mhc recompute needs an mHC layer");
}
Tensor HybridLayer::mhc_replay(State&, const Tensor&) {
  STRATA_INTERNAL_ASSERT(false, name(), ": mhc recompute needs an mHC layer");
  return Tensor();
}

Tensor* MambaHybridLayer::kept_input(State& saved) {
  auto* sv = dynamic_cast<Saved*>(&saved);
  STRATA_INTERNAL_ASSERT(sv != nullptr, name(), ": the saved state is not a Mamba layer's");
  return &sv->layer.mixer.norm.x;
}

std::unique_ptr<HybridLayer> make_hybrid_layer(char symbol, int64_t index, const ResolvedModelConfig& cfg,
                                               const layers::LayerEnv& env, const ParallelGroups& groups,
                                               const std::string& name) {
  switch (symbol) {
    case '*':
    case '-':
    case 'E': return std::make_unique<TransformerHybridLayer>(symbol, index, cfg, env, groups, name);
    case 'M': return std::make_unique<MambaHybridLayer>(index, cfg, env, groups, name);
    default:
      throw config::ConfigError("model.hybrid_layer_pattern", "layer " + std::to_string(index) + " is '" +
                                                                  std::string(1, symbol) + "', not a layer symbol");
  }
}

}  // namespace strata
