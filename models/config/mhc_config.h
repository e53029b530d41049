// The mHC (manifold-constrained hyper-connections) part of the `model` config section: the field
// table (Megatron dev's names and defaults: enable_hyper_connections, num_residual_streams,
// mhc_sinkhorn_iterations, mhc_init_gating_factor, use_fused_mhc, mhc_recompute_layer_num) plus
// Strata's three numerics flags (mhc_norm_eps_inside_sqrt, mhc_keep_mappings_in_fp32,
// mhc_learned_output_contract maps each to a Megatron branch's behaviour) and their
// rules. The members live in ModelConfig (models/config/model_config.h); docs/mhc.md.
// Reference: megatron/core/transformer/transformer_config.py (dev, "Hyper-Connection
// Configuration" and its __post_init__ checks), megatron/training/arguments.py (dev).
#pragma once
#include "core/config_table.h"

namespace strata {

struct ModelConfig;

// Adds the mHC fields to the model section's table.
void add_mhc_fields(config::SectionFields<ModelConfig>& f);
// The cross-field rules (use_fused_mhc needs mHC and excludes the precision flags; the 'mhc'
// recompute module rule below), then — until the layers are wired — the error for
// enable_hyper_connections: true. Part of ResolvedModelConfig's resolution; ConfigError naming the field.
void finalize_mhc_config(const ModelConfig& m);
// The rule for 'mhc' in model.recompute_modules under selective recompute: it needs
// model.enable_hyper_connections and cannot be combined with 'mlp' (Megatron dev). Nothing when the
// list has no 'mhc' or the granularity is not selective.
void check_mhc_recompute_modules(const ModelConfig& m);

// What the mHC module of one site needs from the config (of a resolved section).
struct MhcOptions {
  int64_t streams = 4;
  int64_t sinkhorn_iterations = 20;
  double init_gating_factor = 0.01;
  bool norm_eps_inside_sqrt = false;
  double norm_eps = 1e-6;  // 1e-6 (eps outside the sqrt) or layernorm_epsilon (inside)
  bool keep_mappings_in_fp32 = false;
  bool learned_output_contract = true;
  double contract_eps = 1e-5;  // layernorm_epsilon: the learned contraction's eps
  bool use_fused = false;      // the fused mHC ops (kernels/mhc.h) instead of the composed path (kernels/mhc_composed.h)
};
MhcOptions mhc_options(const ModelConfig& m);

}  // namespace strata
