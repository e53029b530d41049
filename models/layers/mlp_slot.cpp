// The MLP slot and the layer-spec helpers (see mlp_slot.h, layer_spec.h).
#include "models/layers/mlp_slot.h"

#include "core/error.h"
#include "models/layers/moe/moe_layer.h"

namespace strata::layers {

namespace {
struct DenseState : SlotState {
  MLP::Saved mlp;
};
}  // namespace

Tensor DenseMlpSlot::forward(const Tensor& x, const SlotRun& run, std::unique_ptr<SlotState>* saved) const {
  if (!saved) return mlp.forward(x, nullptr, !run.skip_output_bias);
  auto st = std::make_unique<DenseState>();
  Tensor y = mlp.forward(x, &st->mlp, !run.skip_output_bias);
  *saved = std::move(st);
  return y;
}

Tensor DenseMlpSlot::backward(const SlotState& saved, const Tensor& dy) {
  const auto* st = dynamic_cast<const DenseState*>(&saved);
  STRATA_INTERNAL_ASSERT(st != nullptr, "DenseMlpSlot::backward: the saved state is not a dense MLP's");
  return mlp.backward(st->mlp, dy);
}

std::unique_ptr<MlpSlot> make_mlp_slot(MlpKind kind, const std::string& prefix, const ResolvedModelConfig& cfg,
                                       const LayerEnv& env, const ParallelGroups& groups) {
  switch (kind) {
    case MlpKind::Dense:
      return std::make_unique<DenseMlpSlot>(prefix, cfg, env, groups.tp);
    case MlpKind::MoE:
      return std::make_unique<moe::MoELayer>(prefix, cfg, env, groups);
  }
  STRATA_INTERNAL_ASSERT(false, "make_mlp_slot: unknown MlpKind");
  return nullptr;
}


}  // namespace strata::layers
