// The hybrid stack's mHC wrapper (see hybrid_mhc_layer.h).
// Reference: megatron/core/models/hybrid/hybrid_block.py (dev: HyperConnectionHybridLayer.forward).
#include "models/blocks/hybrid_mhc_layer.h"

#include "core/error.h"
#include "kernels/elementwise.h"
#include "models/blocks/transformer_kinds.h"

namespace strata {

namespace {
ProcessGroup sequence_parallel_group(const layers::LayerEnv& env, const ParallelGroups& groups) {
  return env.sequence_parallel && groups.tp.size() > 1 ? groups.tp : ProcessGroup::single("tp");
}
}  // namespace

struct HyperConnectionHybridLayer::Saved : StackLayer::State {
  layers::HyperConnectionState hc;
  layers::TransformerLayer::Saved layer;  // fast path
  std::unique_ptr<StackLayer::State> inner;  // delta path
};

namespace {
LayerPlace inner_place(const StackLayerSpec& spec) {
  LayerPlace p = spec.place;
  p.name = spec.inner_name();
  p.branch_mhc = false;
  return p;
}
}  // namespace

HyperConnectionHybridLayer::HyperConnectionHybridLayer(const StackLayerSpec& spec, const ResolvedModelConfig& cfg,
                                                       const layers::LayerEnv& env, const ParallelGroups& groups)
    : name_(spec.place.name),
      inner_(spec.kind->make(*spec.kind, inner_place(spec), cfg, env, groups)),
      hc_(name_ + ".hyper_connection", cfg->hidden_size, mhc_options(cfg), env, sequence_parallel_group(env, groups)) {
  STRATA_INTERNAL_ASSERT(spec.mhc_wrapper, name_, ": the spec does not wrap its layer in an mHC site");
  auto* t = dynamic_cast<TransformerStackLayer*>(inner_.get());
  // The fast path: a TransformerLayer with one branch (its sub-layer without the residual add).
  if (t && t->layer().has_attention() != t->layer().has_mlp()) fast_ = &t->layer();
}

std::unique_ptr<StackLayer> make_stack_layer(const StackLayerSpec& spec, const ResolvedModelConfig& cfg,
                                             const layers::LayerEnv& env, const ParallelGroups& groups) {
  if (spec.mhc_wrapper) return std::make_unique<HyperConnectionHybridLayer>(spec, cfg, env, groups);
  return spec.kind->make(*spec.kind, spec.place, cfg, env, groups);
}

Tensor HyperConnectionHybridLayer::forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                                           std::unique_ptr<State>* saved, bool replay) {
  Saved local;
  Saved* sv = &local;
  if (saved) {
    auto s = std::make_unique<Saved>();
    sv = s.get();
    *saved = std::move(s);
  }
  const Tensor agg = hc_.forward(x, sv->hc);
  if (fast_) {
    Tensor bias;  // the branch's (y, bias) pair, as Megatron's bda
    const Tensor y = fast_->sublayer_forward(agg, run.keys, run.position_offset, cache, saved ? &sv->layer : nullptr,
                                             run.aux, replay, &bias);
    const layers::DropoutSpec d = run.keys.hidden(fast_->hidden_dropout(), index(), fast_->sublayer_site(), x);
    return hc_.merge(y, bias, d, sv->hc);
  }
  Tensor delta = inner_->forward(agg, run, cache, saved ? &sv->inner : nullptr, replay).clone();
  kernels::axpy(-1.0, agg, delta);  // the layer's own residual add undone: delta = out − agg
  return hc_.merge(delta, Tensor(), layers::DropoutSpec{}, sv->hc);
}

Tensor HyperConnectionHybridLayer::backward(State& state, const Tensor& dy) {
  auto* sv = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(sv != nullptr, name_, ": the saved state is not an mHC hybrid layer's");
  const layers::HyperConnection::MergeGrads g = hc_.merge_backward(dy, sv->hc);
  Tensor g_agg;
  if (fast_) {
    g_agg = fast_->sublayer_backward(sv->layer, g.g_y);
  } else {
    STRATA_CHECK(sv->inner != nullptr, name_, ": backward without a saved forward");
    g_agg = inner_->backward(*sv->inner, g.g_y).clone();
    kernels::axpy(-1.0, g.g_y, g_agg);
    sv->inner.reset();
  }
  sv->layer = {};
  return hc_.backward(g_agg, sv->hc);
}

namespace {
HyperConnectionHybridLayer::State& present(std::unique_ptr<StackLayer::State>& p, const std::string& name) {
  STRATA_CHECK(p != nullptr, name, ": mhc recompute without a saved forward");
  return *p;
}
}  // namespace

// The tensor where the wrapped layer's pre-norm keeps the aggregation (its input).
Tensor& HyperConnectionHybridLayer::kept_aggregation(Saved& sv) {
  if (fast_) return fast_->has_attention() ? sv.layer.input_norm.x : sv.layer.pre_mlp_norm.x;
  Tensor* t = inner_->kept_input(present(sv.inner, name_));
  STRATA_INTERNAL_ASSERT(t != nullptr, name_, ": the inner layer does not expose its kept input");
  return *t;
}

void HyperConnectionHybridLayer::mhc_release(State& state, bool keep_input) {
  auto* sv = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(sv != nullptr, name_, ": the saved state is not an mHC hybrid layer's");
  if (!keep_input) layers::HyperConnection::release_input(sv->hc);
  kept_aggregation(*sv) = Tensor();
}

Tensor HyperConnectionHybridLayer::mhc_replay(State& state, const Tensor& x_in) {
  auto* sv = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(sv != nullptr, name_, ": the saved state is not an mHC hybrid layer's");
  Tensor x = x_in;
  if (!x.defined()) {
    STRATA_CHECK(sv->hc.x.defined(), name_, ": mhc replay without the group input");
    x = sv->hc.x.reshape(sv->hc.shape);
  }
  return hc_.replay(x, sv->hc, &kept_aggregation(*sv));
}

void HyperConnectionHybridLayer::collect(std::vector<Parameter*>& out) {
  inner_->collect(out);
  hc_.collect(out);
}

}  // namespace strata
