// TransformerBlock (see transformer_block.h). Reference: Megatron-Core
// transformer/transformer_block.py (TransformerBlock.forward).
#include "models/blocks/transformer_block.h"

#include "core/error.h"
#include "core/phase_timer.h"
#include "models/blocks/layer_residuals.h"

namespace strata {

struct TransformerBlock::Saved : Block::State {
  std::vector<layers::TransformerLayer::Saved> layers;
};

TransformerBlock::TransformerBlock(int64_t first_layer, const std::vector<layers::TransformerLayerSpec>& specs,
                                   const ModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups)
    : first_layer_(first_layer), dtype_(env.dtype), device_(env.device), sequence_parallel_(env.sequence_parallel) {
  for (size_t i = 0; i < specs.size(); ++i)
    layers_.push_back(std::make_unique<layers::TransformerLayer>(first_layer + static_cast<int64_t>(i), cfg, env,
                                                                 groups, specs[i]));
}

Tensor TransformerBlock::forward(const Tensor& x_in, const BlockRun& run, std::unique_ptr<State>* saved) {
  Saved* sv = nullptr;
  if (saved) {
    auto s = std::make_unique<Saved>();
    s->layers.resize(layers_.size());
    sv = s.get();
    *saved = std::move(s);
  }
  if (run.cache)
    STRATA_CHECK(run.cache->layers.size() == layers_.size(), "TransformerBlock: the generation cache has ",
                 run.cache->layers.size(), " layers, the block ", layers_.size());
  phase_timer::Scope t("forward/layers");
  Tensor x = x_in;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Tensor in = x;
    x = layers_[i]->forward(x, run.keys, run.position_offset, run.cache ? &run.cache->layers[i] : nullptr,
                            sv ? &sv->layers[i] : nullptr, run.aux);
    observe_layer_residuals(layers_[i]->name(), in, x, sequence_parallel_);
  }
  return x;
}

Tensor TransformerBlock::backward(State& state, const Tensor& dy, const GradsReadyFn* grads_ready) {
  auto* sv = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(sv != nullptr && sv->layers.size() == layers_.size(),
                         "TransformerBlock::backward: the saved state is not this block's");
  phase_timer::Scope t("backward/layers");
  Tensor dx = dy;
  for (size_t i = layers_.size(); i-- > 0;) {
    dx = layers_[i]->backward(sv->layers[i], dx);
    sv->layers[i] = {};
    if (grads_ready && *grads_ready) {
      std::vector<Parameter*> ps;
      layers_[i]->collect(ps);
      (*grads_ready)(ps);
    }
  }
  return dx;
}

void TransformerBlock::collect(std::vector<Parameter*>& out) {
  for (auto& l : layers_) l->collect(out);
}

void TransformerBlock::add_caches(InferenceCache& cache, int64_t batch, int64_t max_seq) const {
  for (const auto& l : layers_) {
    layers::LayerKVCache lc;
    if (l->has_attention()) {
      const auto& a = l->self_attention();
      lc.k = Tensor::zeros({max_seq, batch, a.groups(), a.head_dim()}, dtype_, device_);
      lc.v = Tensor::zeros({max_seq, batch, a.groups(), a.head_dim()}, dtype_, device_);
    }
    cache.layers.push_back(lc);
  }
}

}  // namespace strata
