// One Mamba layer of a hybrid stack (the pattern's `M`): out = x + dropout(mixer(norm(x))), the
// pre-norm fused into the mixer's in_proj (mixer.in_proj.layer_norm_weight), hidden_dropout on the
// mixer output (site MambaOutput). Megatron's MambaLayer.norm is IdentityOp with the TE spec, so
// the layer has no parameters of its own; names are "decoder.layers.{i}.mixer.*".
//
// Its interface (the same as TransformerLayer's; the stack calls it through the `M` kind's adapter,
// models/blocks/mamba_kind.h):
//   MambaLayer(index, cfg, env, groups)          index: global layer number (names, dropout keys)
//   Tensor forward(x [s, b, h], keys, position_offset, LayerKVCache* cache, Saved* saved, aux)
//       cache != null: generation — reads and updates cache->mamba (the recurrent state; k/v
//       unused), advances cache->length by s; nothing is saved. saved != null: a training forward
//       keeps what backward needs. position_offset and aux are unused (no positions, no aux loss).
//   Tensor backward(const Saved&, dy [s, b, h]) -> dx; adds parameter gradients into main_grad.
//   void collect(std::vector<Parameter*>&)       the mixer's parameters, in a fixed order
//   LayerKVCache make_cache(batch, max_seq)      a zero state (what Block::add_caches appends)
//   int64_t index(), const std::string& name() ("decoder.layers.{i}"), void end_of_step() (no-op)
// Observation (residual_accumulator / residual_contribution) is done by the block around the
// layer (models/blocks/layer_residuals.h), once per layer as for every layer kind.
// Reference: Megatron-Core ssm/mamba_layer.py (MambaLayer.forward: residual, norm, mixer, mamba_bda),
// models/hybrid/hybrid_layer_specs.py.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/layers/inference_cache.h"
#include "models/layers/layer_common.h"
#include "models/layers/mamba_mixer.h"
#include "models/layers/loss.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

class MambaLayer {
 public:
  struct Saved {
    MambaMixer::Saved mixer;
    DropoutSpec dropout;
  };
  // name: the canonical name prefix when not "decoder.layers.{index}" (an MTP depth's
  // "mtp.layers.{k}.mtp_model_layer.layers.{j}").
  MambaLayer(int64_t index, const ResolvedModelConfig& cfg, const LayerEnv& env, const ParallelGroups& groups,
             const std::string& name = {});
  Tensor forward(const Tensor& x, const DropoutKeys& keys, int64_t position_offset, LayerKVCache* cache,
                 Saved* saved, AuxLossChannel* aux = nullptr) const;
  Tensor backward(const Saved& saved, const Tensor& dy);
  void collect(std::vector<Parameter*>& out) { mixer_.collect(out); }
  LayerKVCache make_cache(int64_t batch, int64_t max_seq) const;
  void end_of_step() {}

  const std::string& name() const { return name_; }
  int64_t index() const { return index_; }
  MambaMixer& mixer() { return mixer_; }

 private:
  int64_t index_;
  std::string name_;
  double hidden_dropout_;
  DType dtype_;  // the mixer's dtype; the residual stream is f32 under model.fp32_residual_connection
  MambaMixer mixer_;
};

}  // namespace strata::layers
