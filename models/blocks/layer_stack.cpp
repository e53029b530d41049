// LayerStack (see layer_stack.h). Reference: megatron/core/transformer/transformer_block.py
// (TransformerBlock.forward), megatron/core/models/hybrid/hybrid_block.py (HybridStack.forward).
#include "models/blocks/layer_stack.h"

#include "core/error.h"
#include "core/phase_timer.h"
#include "models/blocks/layer_residuals.h"

namespace strata {

struct LayerStack::Saved : Block::State {
  std::vector<std::unique_ptr<StackLayer::State>> layers;
  std::vector<RecomputeSaved> chunks;  // one per recompute chunk (full recompute)
};

void StackLayer::mhc_release(State&, bool) {
  STRATA_INTERNAL_ASSERT(false, name(), ": mhc recompute needs a layer with mHC sites");
}
Tensor StackLayer::mhc_replay(State&, const Tensor&) {
  STRATA_INTERNAL_ASSERT(false, name(), ": mhc recompute needs a layer with mHC sites");
  return Tensor();
}

LayerStack::LayerStack(int64_t first_layer, const std::vector<StackLayerSpec>& specs, const ResolvedModelConfig& cfg,
                       const layers::LayerEnv& env, const ParallelGroups& groups, bool full_recompute)
    : first_layer_(first_layer), dtype_(env.dtype), device_(env.device), sequence_parallel_(env.sequence_parallel) {
  if (cfg->enable_hyper_connections) streams_ = cfg->num_residual_streams;
  for (const StackLayerSpec& s : specs) {
    STRATA_INTERNAL_ASSERT(s.place.index == first_layer + static_cast<int64_t>(layers_.size()), "LayerStack: layer ",
                           s.place.name, " is global layer ", s.place.index, ", not ",
                           first_layer + static_cast<int64_t>(layers_.size()));
    symbols_ += s.kind->symbol;
    layers_.push_back(make_stack_layer(s, cfg, env, groups));
  }
  if (full_recompute) recompute_ = full_recompute_chunks(cfg, layers_.size());
  mhc_recompute_ = mhc_recompute_groups(cfg, layers_.size());
}

Tensor LayerStack::layer_forward(size_t i, const Tensor& in, const BlockRun& run, Saved* sv, bool replay) {
  Tensor x = layers_[i]->forward(in, run, run.cache ? &run.cache->layers[i] : nullptr, sv ? &sv->layers[i] : nullptr,
                                 replay || run.replay);
  observe_layer_residuals(layers_[i]->name(), in, x, sequence_parallel_, streams_);  // silent in a replay (SuspendScope)
  return x;
}

Tensor LayerStack::layer_backward(size_t i, Saved& sv, const Tensor& dy, const GradsReadyFn* grads_ready) {
  STRATA_CHECK(sv.layers[i] != nullptr, layers_[i]->name(), ": backward without a saved forward");
  Tensor dx = layers_[i]->backward(*sv.layers[i], dy);
  sv.layers[i].reset();
  report_grads_ready(*layers_[i], grads_ready);
  return dx;
}

Tensor LayerStack::forward(const Tensor& x_in, const BlockRun& run, std::unique_ptr<State>* saved) {
  Saved* sv = nullptr;
  if (saved) {
    auto s = std::make_unique<Saved>();
    s->layers.resize(layers_.size());
    sv = s.get();
    *saved = std::move(s);
  }
  check_block_cache(run, layers_.size(), "LayerStack");
  phase_timer::Scope t("forward/layers");
  auto layer = [&](size_t i, const Tensor& h, const BlockRun& r, bool save, bool replay) {
    Tensor out = layer_forward(i, h, r, save ? sv : nullptr, replay);
    if (save && mhc_recompute_.active()) layers_[i]->mhc_release(*sv->layers[i], mhc_recompute_.opens(i));
    return out;
  };
  return recompute_layers_forward(recompute_, layers_.size(), x_in, run, sv != nullptr, sv ? &sv->chunks : nullptr,
                                  layer);
}

Tensor LayerStack::backward(State& state, const Tensor& dy, const GradsReadyFn* grads_ready) {
  auto* sv = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(sv != nullptr && sv->layers.size() == layers_.size(),
                         "LayerStack::backward: the saved state is not this stack's");
  phase_timer::Scope t("backward/layers");
  auto layer = [&](size_t i, const Tensor& h, const BlockRun& r, bool save, bool replay) {
    return layer_forward(i, h, r, save ? sv : nullptr, replay);
  };
  auto bwd = [&](size_t i, const Tensor& g) {
    mhc_replay_group(mhc_recompute_, i, [&](size_t l, const Tensor& x) {
      STRATA_CHECK(sv->layers[l] != nullptr, layers_[l]->name(), ": mhc recompute without a saved forward");
      return layers_[l]->mhc_replay(*sv->layers[l], x);
    });
    return layer_backward(i, *sv, g, grads_ready);
  };
  return recompute_layers_backward(recompute_, layers_.size(), sv->chunks, dy, layer, bwd);
}

void LayerStack::collect(std::vector<Parameter*>& out) {
  for (auto& l : layers_) l->collect(out);
}

void LayerStack::add_caches(InferenceCache& cache, int64_t batch, int64_t max_seq) const {
  for (const auto& l : layers_) cache.layers.push_back(l->make_cache(batch, max_seq, dtype_, device_));
}

void LayerStack::end_of_step() {
  for (auto& l : layers_) l->end_of_step();
}

std::vector<MoeRouterRef> LayerStack::moe_routers() {
  std::vector<MoeRouterRef> out;
  for (auto& l : layers_)
    if (layers::moe::TopKRouter* r = l->moe_router()) out.push_back({l->index(), r});
  return out;
}

}  // namespace strata
