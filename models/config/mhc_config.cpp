// mHC config fields and rules (models/config/mhc_config.h). Each error is a ConfigError naming the field.
// Reference: megatron/core/transformer/transformer_config.py (dev: num_residual_streams,
// mhc_sinkhorn_iterations, mhc_init_gating_factor, use_fused_mhc "requires enable_hyper_connections",
// 'mhc' recompute "requires enable_hyper_connections" and "incompatible with 'mlp'").
#include "models/config/mhc_config.h"

#include <algorithm>
#include <string>

#include "kernels/mhc.h"
#include "models/config/model_config.h"

namespace strata {

using config::ConfigError;

void add_mhc_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  f.add("enable_hyper_connections", &M::enable_hyper_connections,
        "mHC: n Sinkhorn-mixed residual streams around every layer (docs/mhc.md): two sites per GPT layer "
        "(attention, MLP/MoE), one per hybrid layer; MTP depths too (docs/mtp.md \"MTP with mHC\").")
      .architecture_defining();
  f.add("num_residual_streams", &M::num_residual_streams, "mHC residual streams n.").check(config::positive())
      .architecture_defining();
  f.add("mhc_sinkhorn_iterations", &M::mhc_sinkhorn_iterations,
        "Sinkhorn-Knopp iterations T of the residual mixing matrix (row softmax, then T (row, column) passes).")
      .check(config::positive())
      .architecture_defining();
  f.add("mhc_init_gating_factor", &M::mhc_init_gating_factor,
        "Initial value of the gating factors alpha_pre, alpha_post, alpha_res.")
      .check(config::non_negative());
  f.add("use_fused_mhc", &M::use_fused_mhc,
        "The fused mHC ops (one op each for projection+RMS+gates, aggregation and merge) instead of the "
        "unfused path composed of GEMMs, a gate op and elementwise ops (Megatron's native path); the "
        "Sinkhorn op is shared. Needs enable_hyper_connections; not with mhc_norm_eps_inside_sqrt or "
        "mhc_keep_mappings_in_fp32.");
  f.add("mhc_recompute_layer_num", &M::mhc_recompute_layer_num,
        "Layers per mHC recompute group with 'mhc' in recompute_modules (local order, per stage / model "
        "chunk); each group keeps only its input n-stream tensor. null: one group for the whole local block. "
        "Ignored without 'mhc' (as Megatron).")
      .check(config::positive());
  f.add("mhc_norm_eps_inside_sqrt", &M::mhc_norm_eps_inside_sqrt,
        "mHC mapping norm rsqrt(mean(x^2) + layernorm_epsilon) (DeepSeek-V4) instead of 1/(|x|/sqrt(K) + 1e-6) "
        "(Megatron dev).")
      .architecture_defining();
  f.add("mhc_keep_mappings_in_fp32", &M::mhc_keep_mappings_in_fp32,
        "Keep h_pre, h_post, h_res and the stream mixing in fp32 until the final cast; false: the mappings are "
        "cast to the activation dtype before they are applied (Megatron dev).")
      .architecture_defining();
  f.add("mhc_learned_output_contract", &M::mhc_learned_output_contract,
        "Contract the streams with the learned hc_head weights (Megatron dev); false: their mean (also in MTP "
        "layers).")
      .architecture_defining();
}

void check_mhc_recompute_modules(const ModelConfig& m) {
  const auto& mods = m.recompute_modules;
  auto has = [&](const char* name) { return std::find(mods.begin(), mods.end(), name) != mods.end(); };
  if (m.recompute_granularity != RecomputeGranularity::Selective || !has("mhc")) return;
  if (!m.enable_hyper_connections)
    throw ConfigError("model.recompute_modules", "mhc: needs model.enable_hyper_connections (mHC is off)");
  if (has("mlp"))
    throw ConfigError("model.recompute_modules",
                      "mhc: cannot be combined with mlp (the mhc recompute keeps the MLP output its merge replays "
                      "from; Megatron rejects both)");
}

void finalize_mhc_config(const ModelConfig& m) {
  if (m.use_fused_mhc && !m.enable_hyper_connections)
    throw ConfigError("model.use_fused_mhc", "needs model.enable_hyper_connections (mHC is off)");
  if (m.use_fused_mhc && (m.mhc_norm_eps_inside_sqrt || m.mhc_keep_mappings_in_fp32))
    throw ConfigError("model.use_fused_mhc",
                      std::string("cannot be combined with ") +
                          (m.mhc_norm_eps_inside_sqrt && m.mhc_keep_mappings_in_fp32
                               ? "model.mhc_norm_eps_inside_sqrt and model.mhc_keep_mappings_in_fp32"
                               : (m.mhc_norm_eps_inside_sqrt ? "model.mhc_norm_eps_inside_sqrt"
                                                             : "model.mhc_keep_mappings_in_fp32")) +
                          " (the fused kernels implement Megatron dev's numerics only: eps outside the sqrt, "
                          "mappings cast to the activation dtype)");
  check_mhc_recompute_modules(m);
}

MhcOptions mhc_options(const ModelConfig& m) {
  MhcOptions o;
  o.streams = m.num_residual_streams;
  o.sinkhorn_iterations = m.mhc_sinkhorn_iterations;
  o.init_gating_factor = m.mhc_init_gating_factor;
  o.norm_eps_inside_sqrt = m.mhc_norm_eps_inside_sqrt;
  o.norm_eps = m.mhc_norm_eps_inside_sqrt ? m.layernorm_epsilon : kernels::kMhcNormEps;
  o.keep_mappings_in_fp32 = m.mhc_keep_mappings_in_fp32;
  o.learned_output_contract = m.mhc_learned_output_contract;
  o.contract_eps = m.layernorm_epsilon;
  o.use_fused = m.use_fused_mhc;
  return o;
}

}  // namespace strata
