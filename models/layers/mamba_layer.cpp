// One Mamba layer (see mamba_layer.h). Reference: Megatron-Core ssm/mamba_layer.py.
#include "models/layers/mamba_layer.h"

#include "core/error.h"
#include "core/phase_timer.h"
#include "kernels/elementwise.h"

namespace strata::layers {

MambaLayer::MambaLayer(int64_t index, const ResolvedModelConfig& cfg, const LayerEnv& env, const ParallelGroups& groups,
                       const std::string& name)
    : index_(index),
      name_(name.empty() ? "decoder.layers." + std::to_string(index) : name),
      hidden_dropout_(cfg->hidden_dropout),
      dtype_(env.dtype),
      mixer_(name_ + ".mixer", cfg, env, groups) {}

Tensor MambaLayer::forward(const Tensor& x, const DropoutKeys& keys, int64_t /*position_offset*/,
                           LayerKVCache* cache, Saved* saved, AuxLossChannel* /*aux*/) const {
  STRATA_CHECK(cache == nullptr || cache->mamba.defined(), name_, ": the generation cache has no Mamba state");
  Saved local;
  Saved& sv = saved ? *saved : local;
  Tensor m;
  {
    phase_timer::Scope t("forward/layers/mamba");
    // The fp32 residual stream enters the mixer in the layer's dtype (Megatron's MambaLayer casts
    // hidden_states to params_dtype before its norm; the residual stays f32).
    const Tensor in = x.dtype() == dtype_ ? x : x.to(dtype_);
    m = mixer_.forward(in, cache ? &cache->mamba : nullptr, (saved && !cache) ? &sv.mixer : nullptr, keys.packed);
  }
  if (cache) cache->length += x.size(0);
  sv.dropout = keys.hidden(hidden_dropout_, index_, DropoutSite::MambaOutput, m);
  return residual_add(x, m, sv.dropout);
}

Tensor MambaLayer::backward(const Saved& sv, const Tensor& dy) {
  Tensor dm;
  {
    phase_timer::Scope t("backward/layers/mamba");
    dm = mixer_.backward(sv.mixer, residual_branch_grad(dy, sv.dropout, dtype_));
  }
  return residual_grad_sum(dy, dm);
}

LayerKVCache MambaLayer::make_cache(int64_t batch, int64_t /*max_seq*/) const {
  LayerKVCache c;
  c.mamba = mixer_.make_cache(batch);
  return c;
}

}  // namespace strata::layers
