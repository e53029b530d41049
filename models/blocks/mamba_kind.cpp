// The Mamba2 layer kind `M` (see mamba_kind.h): the stack adapter, the activations its Saved struct
// holds and its layout rules (its parameters are the mixer's own, models/layers/mamba_mixer.h).
// Reference: megatron/core/ssm/mamba_mixer.py, models/hybrid/hybrid_layer_specs.py.
#include "models/blocks/mamba_kind.h"

#include "core/config_table.h"
#include "models/config/mamba_config.h"

namespace strata {

struct MambaStackLayer::Saved : StackLayer::State {
  layers::MambaLayer::Saved layer;
};

Tensor MambaStackLayer::forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                                std::unique_ptr<State>* saved, bool /*replay: a Mamba layer has no per-step state*/) {
  Saved* sv = start_saving<Saved>(saved);
  return layer_.forward(x, run.keys, run.position_offset, cache, sv ? &sv->layer : nullptr, run.aux);
}

Tensor MambaStackLayer::backward(State& saved, const Tensor& dy) {
  return layer_.backward(saved_as<Saved>(saved, *this).layer, dy);
}

Tensor* MambaStackLayer::kept_input(State& saved) { return &saved_as<Saved>(saved, *this).layer.mixer.norm.x; }

namespace {

// MambaLayer::Saved: norm and in_proj inputs e·T·C each (sp) with the norm's statistics, conv input
// and output 2e·T·conv_dim, gate, scan output and out_proj input 3e·T·d_inner, dt before and after
// softplus 2e·T·H (/t); its backward adds the in_proj, conv and gate gradients.
LayerActivations mamba_activations(const ResolvedModelConfig& m, const LayerPlace&, const ActivationShape& a) {
  const MambaDims d = mamba_dims(m);
  const int64_t T = a.tokens, Ts = a.sequence_rows(), C = m->hidden_size, e = a.e, t = a.tp;
  const int64_t norm_stats = 4 * Ts * (m->normalization == Normalization::LayerNorm ? 2 : 1);
  LayerActivations r;
  r.input = e * Ts * C;
  r.full = e * Ts * C + norm_stats + e * Ts * C + e * T * (2 * d.conv_dim() + 3 * d.d_inner + 2 * d.heads) / t;
  r.backward = e * T * (d.in_proj_out() + 2 * d.conv_dim() + d.d_inner) / t;  // dzx, dxbc (+ conv in), dg
  return r;
}

// The Mamba layers' heads and groups split over tp (check_mamba_config); no context parallelism.
void check_mamba_layout(const ResolvedModelConfig& m, const ParallelConfig& p, int64_t position) {
  check_mamba_config(m, p.tensor_model_parallel_size);
  const int64_t cp = p.context_parallel_size;
  if (cp > 1)
    throw config::ConfigError("parallel.context_parallel_size",
                              std::to_string(cp) + " is not supported with Mamba layers ('M' at position " +
                                  std::to_string(position) +
                                  " of model.hybrid_layer_pattern): the SSM state is not handed across cp ranks");
}

}  // namespace

void register_mamba_kind(LayerKindRegistry& registry) {
  LayerKind k;
  k.symbol = 'M', k.name = "Mamba2";
  k.recompute_modules = {"mhc"};
  k.make = [](const LayerKind& kind, const LayerPlace& place, const ResolvedModelConfig& cfg,
              const layers::LayerEnv& env, const ParallelGroups& groups) -> std::unique_ptr<StackLayer> {
    return std::make_unique<MambaStackLayer>(kind, place, cfg, env, groups);
  };
  k.sites = [](const ResolvedModelConfig&, const LayerPlace&, std::vector<ObservationSite>&) {};
  k.losses = [](const ResolvedModelConfig&, const LayerPlace&) { return std::vector<std::string>{}; };
  k.activations = mamba_activations;
  k.attention_flops_per_token = [](const ResolvedModelConfig&) { return 0.0; };
  k.check_parallel_layout = check_mamba_layout;
  registry.add(std::move(k));
}

}  // namespace strata
