// HybridStack (see hybrid_stack.h). Reference: megatron/core/models/hybrid/hybrid_block.py
// (HybridStack.forward: the layer loop).
#include "models/blocks/hybrid_stack.h"

#include "core/error.h"
#include "core/phase_timer.h"
#include "models/blocks/layer_residuals.h"

namespace strata {

struct HybridStack::Saved : Block::State {
  std::vector<std::unique_ptr<HybridLayer::State>> layers;
  std::vector<RecomputeSaved> chunks;  // one per recompute chunk (full recompute)
};

HybridStack::HybridStack(int64_t first_layer, const std::string& symbols, const ModelConfig& cfg,
                         const layers::LayerEnv& env, const ParallelGroups& groups)
    : first_layer_(first_layer),
      symbols_(symbols),
      dtype_(env.dtype),
      device_(env.device),
      sequence_parallel_(env.sequence_parallel) {
  for (size_t i = 0; i < symbols.size(); ++i)
    layers_.push_back(make_hybrid_layer(symbols[i], first_layer + static_cast<int64_t>(i), cfg, env, groups));
  recompute_ = full_recompute_chunks(cfg, layers_.size());
}

Tensor HybridStack::layer_forward(size_t i, const Tensor& in, const BlockRun& run, Saved* sv, bool replay) {
  Tensor x = layers_[i]->forward(in, run, run.cache ? &run.cache->layers[i] : nullptr, sv ? &sv->layers[i] : nullptr,
                                 replay);
  observe_layer_residuals(layers_[i]->name(), in, x, sequence_parallel_);  // silent in a replay (SuspendScope)
  return x;
}

Tensor HybridStack::layer_backward(size_t i, Saved& sv, const Tensor& dy, const GradsReadyFn* grads_ready) {
  STRATA_CHECK(sv.layers[i] != nullptr, layers_[i]->name(), ": backward without a saved forward");
  Tensor dx = layers_[i]->backward(*sv.layers[i], dy);
  sv.layers[i].reset();
  if (grads_ready && *grads_ready) {
    std::vector<Parameter*> ps;
    layers_[i]->collect(ps);
    (*grads_ready)(ps);
  }
  return dx;
}

Tensor HybridStack::forward(const Tensor& x_in, const BlockRun& run, std::unique_ptr<State>* saved) {
  Saved* sv = nullptr;
  if (saved) {
    auto s = std::make_unique<Saved>();
    s->layers.resize(layers_.size());
    sv = s.get();
    *saved = std::move(s);
  }
  if (run.cache)
    STRATA_CHECK(run.cache->layers.size() == layers_.size(), "HybridStack: the generation cache has ",
                 run.cache->layers.size(), " layers, the stack ", layers_.size());
  phase_timer::Scope t("forward/layers");
  Tensor x = x_in;
  size_t next_chunk = 0;
  for (size_t i = 0; i < layers_.size();) {
    if (sv && next_chunk < recompute_.size() && recompute_[next_chunk].begin == i) {
      // A checkpointed chunk: run without saving, keep its input.
      const RecomputeChunk& c = recompute_[next_chunk++];
      RecomputeSaved& cs = sv->chunks.emplace_back();
      cs.keys = run.keys;
      cs.position_offset = run.position_offset;
      auto fwd = [&](size_t l, const Tensor& h, AuxLossChannel* aux, bool, bool) {
        BlockRun r = run;
        r.aux = aux;
        return layer_forward(l, h, r, nullptr, false);
      };
      x = recompute_chunk_forward(c, x, run.aux, fwd, &cs);
      i = c.end;
      continue;
    }
    x = layer_forward(i, x, run, sv, false);
    ++i;
  }
  return x;
}

Tensor HybridStack::backward(State& state, const Tensor& dy, const GradsReadyFn* grads_ready) {
  auto* sv = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(sv != nullptr && sv->layers.size() == layers_.size(),
                         "HybridStack::backward: the saved state is not this stack's");
  phase_timer::Scope t("backward/layers");
  STRATA_INTERNAL_ASSERT(sv->chunks.size() == recompute_.size(), "HybridStack::backward: ", sv->chunks.size(),
                         " saved recompute chunks, the stack has ", recompute_.size());
  Tensor dx = dy;
  size_t chunk = recompute_.size();
  for (size_t i = layers_.size(); i > 0;) {
    if (chunk > 0 && recompute_[chunk - 1].end == i) {
      const RecomputeChunk& c = recompute_[--chunk];
      RecomputeSaved& cs = sv->chunks[chunk];
      auto fwd = [&](size_t l, const Tensor& h, AuxLossChannel* aux, bool, bool replay) {
        BlockRun r;
        r.keys = cs.keys;
        r.position_offset = cs.position_offset;
        r.aux = aux;
        return layer_forward(l, h, r, sv, replay);
      };
      auto bwd = [&](size_t l, const Tensor& g) { return layer_backward(l, *sv, g, grads_ready); };
      dx = recompute_chunk_backward(c, cs, dx, fwd, bwd);
      i = c.begin;
      continue;
    }
    --i;
    dx = layer_backward(i, *sv, dx, grads_ready);
  }
  return dx;
}

void HybridStack::collect(std::vector<Parameter*>& out) {
  for (auto& l : layers_) l->collect(out);
}

void HybridStack::add_caches(InferenceCache& cache, int64_t batch, int64_t max_seq) const {
  for (const auto& l : layers_) cache.layers.push_back(l->make_cache(batch, max_seq, dtype_, device_));
}

void HybridStack::end_of_step() {
  for (auto& l : layers_) l->end_of_step();
}

std::vector<MoeRouterRef> HybridStack::moe_routers() {
  std::vector<MoeRouterRef> out;
  for (auto& l : layers_)
    if (layers::moe::TopKRouter* r = l->moe_router()) out.push_back({l->index(), r});
  return out;
}

}  // namespace strata
