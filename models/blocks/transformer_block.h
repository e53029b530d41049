// TransformerBlock: layers [first_layer, first_layer + n) of a model, each a TransformerLayer
// assembled from its spec (full, attention-only or MLP-only; the MLP slot dense now, MoE next),
// run in order over the residual stream [s, b, h]. The block loop is where observation sites
// fire per layer and where full activation recompute replays chunks of layers (models/blocks/recompute.h).
// Reference: Megatron-Core transformer/transformer_block.py (TransformerBlock, _get_block_submodules,
// the layer loop in forward).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/block.h"
#include "models/blocks/mhc_recompute.h"
#include "models/blocks/recompute.h"
#include "models/layers/layer_spec.h"
#include "models/layers/transformer_layer.h"
#include "models/model_config.h"
#include "parallel/process_group.h"

namespace strata {

class TransformerBlock : public Block {
 public:
  // specs: one per layer of the block (global layers first_layer …). names: the layers' canonical
  // name prefixes when not "decoder.layers.{i}" (an MTP depth's "mtp.layers.{k}.transformer_layer").
  TransformerBlock(int64_t first_layer, const std::vector<layers::TransformerLayerSpec>& specs, const ResolvedModelConfig& cfg,
                   const layers::LayerEnv& env, const ParallelGroups& groups,
                   const std::vector<std::string>& names = {});

  Tensor forward(const Tensor& x, const BlockRun& run, std::unique_ptr<State>* saved) override;
  Tensor backward(State& saved, const Tensor& dy, const GradsReadyFn* grads_ready) override;
  void collect(std::vector<Parameter*>& out) override;
  void add_caches(InferenceCache& cache, int64_t batch, int64_t max_seq) const override;
  int64_t num_layers() const override { return static_cast<int64_t>(layers_.size()); }
  int64_t first_layer() const override { return first_layer_; }
  void end_of_step() override {
    for (auto& l : layers_) l->end_of_step();
  }
  std::vector<MoeRouterRef> moe_routers() override {
    std::vector<MoeRouterRef> out;
    for (auto& l : layers_)
      if (layers::moe::TopKRouter* r = l->moe_router()) out.push_back({l->index(), r});
    return out;
  }

  // Local layer i (global first_layer() + i).
  layers::TransformerLayer& layer(size_t i) { return *layers_.at(i); }
  const layers::TransformerLayer& layer(size_t i) const { return *layers_.at(i); }

 private:
  struct Saved;
  // One layer's forward / backward for the recompute chunks (models/blocks/recompute.h).
  Tensor layer_forward(size_t i, const Tensor& x, const BlockRun& run, Saved* sv, bool replay);
  Tensor layer_backward(size_t i, Saved& sv, const Tensor& dy, const GradsReadyFn* grads_ready);
  int64_t first_layer_;
  DType dtype_;
  Device device_;
  bool sequence_parallel_ = false;  // the residual observations are tp-sharded along the sequence
  std::vector<std::unique_ptr<layers::TransformerLayer>> layers_;
  std::vector<RecomputeChunk> recompute_;  // full recompute: the checkpointed chunks (empty: none)
  MhcRecomputeGroups mhc_recompute_;       // selective mhc recompute groups (empty: none)
};

}  // namespace strata
