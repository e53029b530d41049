// The MLP slot of a transformer layer: one interface for whatever follows the pre-MLP norm, so a
// dense MLP and (next) the MoE layer are interchangeable choices of a layer spec
// (models/layers/layer_spec.h). A slot gets the layer's run context (dropout keys, the
// auxiliary-loss channel of the micro-batch, the global layer number) and saves its activations in
// a slot-owned state object.
// Reference: Megatron-Core transformer/transformer_layer.py (the `mlp` submodule: MLP or MoELayer
// built from a ModuleSpec), transformer/mlp.py.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/layers/layer_common.h"
#include "models/layers/layer_spec.h"
#include "models/layers/mlp.h"
#include "models/layers/loss.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

namespace moe {
class TopKRouter;
}

// What a slot's forward may use besides its input.
struct SlotRun {
  int64_t layer = 0;                 // global layer number
  const DropoutKeys* keys = nullptr;  // this micro-batch's keys (keys->training: a training forward)
  AuxLossChannel* aux = nullptr;     // where auxiliary losses go (null: generation, no losses)
  // An activation-recompute replay of a forward that already ran (models/blocks/recompute.h):
  // per-step side effects (the router's token counts) are skipped.
  bool replay = false;
  // mHC: the dense MLP leaves linear_fc2's bias out (output_bias(); the merge adds it). The MoE
  // slot keeps whatever bias its output has inside it.
  bool skip_output_bias = false;
};

// A slot's saved activations (each slot kind derives its own).
struct SlotState {
  virtual ~SlotState() = default;
};

class MlpSlot {
 public:
  virtual ~MlpSlot() = default;
  // x: [s, b, h] -> [s, b, h]; saves into *saved when saved is not null.
  virtual Tensor forward(const Tensor& x, const SlotRun& run, std::unique_ptr<SlotState>* saved) const = 0;
  // dy: [s, b, h] -> dx: [s, b, h]; adds parameter gradients into main_grad.
  virtual Tensor backward(const SlotState& saved, const Tensor& dy) = 0;
  virtual void collect(std::vector<Parameter*>& out) = 0;
  virtual MlpKind kind() const = 0;
  // After the optimizer step, at the end of a global batch (per-step state such as MoE's
  // global_aux_loss running sums restarts).
  virtual void end_of_step() {}
  // The slot's MoE router (null for a dense slot).
  virtual moe::TopKRouter* moe_router() { return nullptr; }
  // The bias a forward with SlotRun::skip_output_bias left out (undefined: none).
  virtual Tensor output_bias() const { return Tensor(); }
};

// The dense MLP in the slot.
class DenseMlpSlot : public MlpSlot {
 public:
  DenseMlpSlot(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env, const ProcessGroup& tp)
      : mlp(prefix, cfg, cfg.ffn(), env, tp) {}
  Tensor forward(const Tensor& x, const SlotRun& run, std::unique_ptr<SlotState>* saved) const override;
  Tensor backward(const SlotState& saved, const Tensor& dy) override;
  void collect(std::vector<Parameter*>& out) override { mlp.collect(out); }
  MlpKind kind() const override { return MlpKind::Dense; }
  Tensor output_bias() const override {
    return mlp.linear_fc2.has_bias ? mlp.linear_fc2.bias.value : Tensor();
  }

  MLP mlp;
};

// The slot of a spec; prefix: "decoder.layers.{i}.mlp".
std::unique_ptr<MlpSlot> make_mlp_slot(MlpKind kind, const std::string& prefix, const ResolvedModelConfig& cfg,
                                       const LayerEnv& env, const ParallelGroups& groups);

}  // namespace strata::layers
