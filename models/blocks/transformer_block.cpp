// TransformerBlock (see transformer_block.h). Reference: Megatron-Core
// transformer/transformer_block.py (TransformerBlock.forward).
#include "models/blocks/transformer_block.h"

#include "core/error.h"
#include "core/phase_timer.h"
#include "models/blocks/layer_residuals.h"
#include "models/blocks/recompute.h"

namespace strata {

struct TransformerBlock::Saved : Block::State {
  std::vector<layers::TransformerLayer::Saved> layers;
  std::vector<RecomputeSaved> chunks;  // one per recompute chunk (full recompute)
};

TransformerBlock::TransformerBlock(int64_t first_layer, const std::vector<layers::TransformerLayerSpec>& specs,
                                   const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                                   const std::vector<std::string>& names)
    : first_layer_(first_layer), dtype_(env.dtype), device_(env.device), sequence_parallel_(env.sequence_parallel) {
  STRATA_INTERNAL_ASSERT(names.empty() || names.size() == specs.size(), "TransformerBlock: ", names.size(),
                         " names for ", specs.size(), " layers");
  for (size_t i = 0; i < specs.size(); ++i)
    layers_.push_back(std::make_unique<layers::TransformerLayer>(first_layer + static_cast<int64_t>(i), cfg, env,
                                                                 groups, specs[i], names.empty() ? std::string() : names[i]));
  recompute_ = full_recompute_chunks(cfg, layers_.size());
  mhc_recompute_ = mhc_recompute_groups(cfg, layers_.size());
}

Tensor TransformerBlock::layer_forward(size_t i, const Tensor& in, const BlockRun& run, Saved* sv, bool replay) {
  Tensor x = layers_[i]->forward(in, run.keys, run.position_offset, run.cache ? &run.cache->layers[i] : nullptr,
                                 sv ? &sv->layers[i] : nullptr, run.aux, replay || run.replay);
  observe_layer_residuals(layers_[i]->name(), in, x, sequence_parallel_, layers_[i]->residual_streams());  // silent in a replay (SuspendScope)
  return x;
}

Tensor TransformerBlock::layer_backward(size_t i, Saved& sv, const Tensor& dy, const GradsReadyFn* grads_ready) {
  Tensor dx = layers_[i]->backward(sv.layers[i], dy);
  sv.layers[i] = {};
  report_grads_ready(*layers_[i], grads_ready);
  return dx;
}

Tensor TransformerBlock::forward(const Tensor& x_in, const BlockRun& run, std::unique_ptr<State>* saved) {
  Saved* sv = nullptr;
  if (saved) {
    auto s = std::make_unique<Saved>();
    s->layers.resize(layers_.size());
    sv = s.get();
    *saved = std::move(s);
  }
  check_block_cache(run, layers_.size(), "TransformerBlock");
  phase_timer::Scope t("forward/layers");
  auto layer = [&](size_t i, const Tensor& h, const BlockRun& r, bool save, bool replay) {
    Tensor out = layer_forward(i, h, r, save ? sv : nullptr, replay);
    if (save && mhc_recompute_.active()) layers_[i]->mhc_release(sv->layers[i], mhc_recompute_.opens(i));
    return out;
  };
  return recompute_layers_forward(recompute_, layers_.size(), x_in, run, sv != nullptr, sv ? &sv->chunks : nullptr,
                                  layer);
}

Tensor TransformerBlock::backward(State& state, const Tensor& dy, const GradsReadyFn* grads_ready) {
  auto* sv = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(sv != nullptr && sv->layers.size() == layers_.size(),
                         "TransformerBlock::backward: the saved state is not this block's");
  phase_timer::Scope t("backward/layers");
  auto layer = [&](size_t i, const Tensor& h, const BlockRun& r, bool save, bool replay) {
    return layer_forward(i, h, r, save ? sv : nullptr, replay);
  };
  auto bwd = [&](size_t i, const Tensor& g) {
    mhc_replay_group(mhc_recompute_, i, [&](size_t l, const Tensor& x) { return layers_[l]->mhc_replay(x, sv->layers[l]); });
    return layer_backward(i, *sv, g, grads_ready);
  };
  return recompute_layers_backward(recompute_, layers_.size(), sv->chunks, dy, layer, bwd);
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
