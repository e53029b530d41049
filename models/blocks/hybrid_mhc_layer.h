// The layer stack's mHC wrapper (Megatron dev HyperConnectionHybridLayer): with
// model.enable_hyper_connections every layer of a hybrid model's stack (and a GPT model's layers
// that cannot hold one site per branch) is one hyper-connection site,
// decoder.layers.<i>.hyper_connection.*, around the layer built with mHC off under
// decoder.layers.<i>.inner_layer.*, over the n-stream residual x [s, b, n·h]:
//   agg = hc.forward(x)
//   fast path (TransformerLayer kinds with one branch: `*`, `-`, `E`): (y, bias) = the branch's sub-layer
//     on agg without its residual add; x_next = hc.merge(y, bias, dropout = hidden_dropout with the
//     branch's key, drawn on [s, b, n·h]);
//   delta path (every other kind, e.g. `M`): out = the whole layer on agg (agg + dropout(mixer(norm(agg)))),
//     delta = out − agg; x_next = hc.merge(delta, no bias, no dropout).
// Backward in reverse (delta path: d agg = innerᵀ(g_y) − g_y). Observation owner and the layer's
// name: decoder.layers.<i> (the wrapper). Selective mhc recompute (models/blocks/mhc_recompute.h):
// mhc_release drops the site input and the aggregation the inner layer's pre-norm keeps (the
// Mamba layer exposes it through StackLayer::kept_input), mhc_replay rebuilds both.
// Reference: megatron/core/models/hybrid/hybrid_block.py (dev: HyperConnectionHybridLayer).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/stack_layer.h"
#include "models/layers/hyper_connection.h"
#include "models/layers/transformer_layer.h"

namespace strata {

class HyperConnectionHybridLayer : public StackLayer {
 public:
  // spec.place.name: the wrapper's name; the inner layer is spec.inner_name(), built with mHC off.
  HyperConnectionHybridLayer(const StackLayerSpec& spec, const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
                             const ParallelGroups& groups);
  Tensor forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache, std::unique_ptr<State>* saved,
                 bool replay) override;
  Tensor backward(State& saved, const Tensor& dy) override;
  void collect(std::vector<Parameter*>& out) override;
  // Selective mhc recompute: the site input (unless keep_input) and the aggregation the inner
  // layer's pre-norm keeps are dropped; the replay rebuilds both and returns the merge output.
  void mhc_release(State& saved, bool keep_input) override;
  Tensor mhc_replay(State& saved, const Tensor& x) override;
  layers::LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const override {
    return inner_->make_cache(batch, max_seq, dtype, device);
  }
  void end_of_step() override { inner_->end_of_step(); }
  layers::moe::TopKRouter* moe_router() override { return inner_->moe_router(); }
  const std::string& name() const override { return name_; }
  int64_t index() const override { return inner_->index(); }
  const LayerKind& kind() const override { return inner_->kind(); }
  StackLayer& inner() { return *inner_; }
  layers::HyperConnection& hyper_connection() { return hc_; }

 private:
  struct Saved;
  Tensor& kept_aggregation(Saved& sv);
  std::string name_;
  std::unique_ptr<StackLayer> inner_;
  layers::TransformerLayer* fast_ = nullptr;  // the inner single-branch layer (fast path); null: delta path
  layers::HyperConnection hc_;
};

}  // namespace strata
