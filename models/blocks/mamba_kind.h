// The Mamba2 layer kind `M` (models/layers/mamba_layer.h: the mixer with its fused pre-norm and a
// recurrent-state generation cache): the stack adapter and its registration.
// Reference: megatron/core/models/hybrid/hybrid_layer_specs.py (mamba_layer), ssm/mamba_mixer.py.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "models/blocks/stack_layer.h"
#include "models/layers/mamba_layer.h"

namespace strata {

class MambaStackLayer : public StackLayer {
 public:
  MambaStackLayer(const LayerKind& kind, const LayerPlace& place, const ResolvedModelConfig& cfg,
                  const layers::LayerEnv& env, const ParallelGroups& groups)
      : kind_(kind), layer_(place.index, cfg, env, groups, place.name) {}
  Tensor forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache, std::unique_ptr<State>* saved,
                 bool replay) override;
  Tensor backward(State& saved, const Tensor& dy) override;
  void collect(std::vector<Parameter*>& out) override { layer_.collect(out); }
  layers::LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType, Device) const override {
    return layer_.make_cache(batch, max_seq);
  }
  void end_of_step() override { layer_.end_of_step(); }
  const std::string& name() const override { return layer_.name(); }
  int64_t index() const override { return layer_.index(); }
  const LayerKind& kind() const override { return kind_; }
  Tensor* kept_input(State& saved) override;
  layers::MambaLayer& layer() { return layer_; }

 private:
  struct Saved;
  const LayerKind& kind_;
  layers::MambaLayer layer_;
};

// Registers `M`.
void register_mamba_kind(LayerKindRegistry& registry);

}  // namespace strata
