// LayerStack: layers [first_layer, first_layer + n) of a model, one per StackLayerSpec (a layer
// kind of models/config/layer_kind.h at its place), run in order over the residual stream [s, b, h]
// ([s, b, n·h] with mHC). The one block both models use: the GPT model's stack is a uniform
// pattern of its `T` layers (the MoE slot by model.moe_layer_freq), the hybrid model's the symbols
// of model.hybrid_layer_pattern, an MTP depth's a nested stack. The layer loop observes every
// layer's residuals once (observe_layer_residuals), owns the layers' saved state per micro-batch,
// replays chunks of layers under full recompute (models/blocks/recompute.h) and groups of mHC
// sites under selective mhc recompute (models/blocks/mhc_recompute.h), makes one generation cache
// per layer, exposes the MoE routers and restarts per-step state.
// Reference: megatron/core/transformer/transformer_block.py (TransformerBlock.forward: the layer
// loop), megatron/core/models/hybrid/hybrid_block.py (HybridStack.__init__, forward).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/block.h"
#include "models/blocks/mhc_recompute.h"
#include "models/blocks/recompute.h"
#include "models/blocks/stack_layer.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata {

class LayerStack : public Block {
 public:
  // specs: one per layer (models/config/layer_kind.h stack_layer_specs); first_layer: the global number of
  // the first (the specs' first place, or where an empty stack would start).
  // full_recompute false: the stack does not checkpoint its layers under recompute_granularity full
  // (an MTP depth's inner stack: the MTP block checkpoints each depth as one, as Megatron-LM does).
  LayerStack(int64_t first_layer, const std::vector<StackLayerSpec>& specs, const ResolvedModelConfig& cfg,
             const layers::LayerEnv& env, const ParallelGroups& groups, bool full_recompute = true);

  Tensor forward(const Tensor& x, const BlockRun& run, std::unique_ptr<State>* saved) override;
  Tensor backward(State& saved, const Tensor& dy, const GradsReadyFn* grads_ready) override;
  void collect(std::vector<Parameter*>& out) override;
  void add_caches(InferenceCache& cache, int64_t batch, int64_t max_seq) const override;
  int64_t num_layers() const override { return static_cast<int64_t>(layers_.size()); }
  int64_t first_layer() const override { return first_layer_; }
  void end_of_step() override;
  std::vector<MoeRouterRef> moe_routers() override;

  // The symbols of this stack's layers, and local layer i (global first_layer() + i).
  const std::string& symbols() const { return symbols_; }
  StackLayer& layer(size_t i) { return *layers_.at(i); }

 private:
  struct Saved;
  Tensor layer_forward(size_t i, const Tensor& in, const BlockRun& run, Saved* sv, bool replay);
  Tensor layer_backward(size_t i, Saved& sv, const Tensor& dy, const GradsReadyFn* grads_ready);
  std::vector<RecomputeChunk> recompute_;  // full recompute: the checkpointed chunks (empty: none)
  MhcRecomputeGroups mhc_recompute_;       // selective mhc recompute groups (empty: none)
  int64_t first_layer_;
  std::string symbols_;
  DType dtype_;
  Device device_;
  bool sequence_parallel_ = false;  // the residual observations are tp-sharded along the sequence
  int64_t streams_ = 1;             // mHC residual streams
  std::vector<std::unique_ptr<StackLayer>> layers_;
};

}  // namespace strata
