// HybridStack: layers [first_layer, first_layer + n) of a hybrid model, one per symbol of its part
// of model.hybrid_layer_pattern (`*` attention, `-` MLP, `E` MoE; `M` Mamba2 with the mixer), run
// in order over the residual stream [s, b, h] — the sibling of TransformerBlock. The layer loop
// observes every layer's residuals once (observe_layer_residuals), owns the layers' saved state per
// micro-batch, one generation cache per layer, exposes the MoE routers and restarts per-step state.
// With mHC (model.enable_hyper_connections) every layer is wrapped in one hyper-connection site
// (models/blocks/hybrid_mhc_layer.h) and the residual is [s, b, n·h].
// The final norm is the language-model shell's (decoder.final_norm, models/hybrid/hybrid_model.h).
// Reference: megatron/core/models/hybrid/hybrid_block.py (HybridStack.__init__, forward).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/block.h"
#include "models/blocks/mhc_recompute.h"
#include "models/blocks/recompute.h"
#include "models/blocks/hybrid_layers.h"
#include "models/model_config.h"
#include "parallel/process_group.h"

namespace strata {

class HybridStack : public Block {
 public:
  // symbols: one per layer of the stack (global layers first_layer …). name_prefix: when set, local
  // layer j is named name_prefix + j (an MTP depth's nested stack,
  // "mtp.layers.{k}.mtp_model_layer.layers."), else "decoder.layers.{first_layer + j}".
  HybridStack(int64_t first_layer, const std::string& symbols, const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
              const ParallelGroups& groups, const std::string& name_prefix = {});

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
  HybridLayer& layer(size_t i) { return *layers_.at(i); }

 private:
  struct Saved;
  Tensor layer_forward(size_t i, const Tensor& in, const BlockRun& run, Saved* sv, bool replay);
  Tensor layer_backward(size_t i, Saved& sv, const Tensor& dy, const GradsReadyFn* grads_ready);
  std::vector<RecomputeChunk> recompute_;  // full recompute (models/blocks/recompute.h); empty: none
  MhcRecomputeGroups mhc_recompute_;       // selective mhc recompute groups (empty: none)
  int64_t first_layer_;
  std::string symbols_;
  DType dtype_;
  Device device_;
  bool sequence_parallel_ = false;  // the residual observations are tp-sharded along the sequence
  int64_t streams_ = 1;             // mHC residual streams
  std::vector<std::unique_ptr<HybridLayer>> layers_;
};

}  // namespace strata
