// The activation-recompute fields of the `model` section and their rules (models/config/recompute_config.h).
// Reference: megatron/core/transformer/transformer_config.py (TransformerConfig.__post_init__: the
// recompute_granularity / recompute_method / recompute_num_layers / recompute_modules checks and
// the moe_layer_recompute mapping), megatron/training/arguments.py (validate_args).
#include "models/config/recompute_config.h"

#include <algorithm>
#include <string>
#include <vector>

#include "models/config/layer_kind.h"
#include "models/config/model_config.h"

namespace strata {

using config::ConfigError;

const char* to_string(RecomputeGranularity g) {
  return config::enum_to_string<RecomputeGranularity>(kRecomputeGranularityNames, g);
}
const char* to_string(RecomputeMethod m) { return config::enum_to_string<RecomputeMethod>(kRecomputeMethodNames, m); }

namespace {

// The modules Strata recomputes: those its layer kinds declare (models/config/layer_kind.h), each once.
std::vector<std::string> implemented_modules() {
  std::vector<std::string> out;
  for (const LayerKind& k : LayerKindRegistry::instance().kinds())
    for (const std::string& name : k.recompute_modules)
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

// "a, b and c".
std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

// Megatron's other module names and why Strata rejects each.
struct Rejected {
  const char* name;
  const char* why;
};
constexpr Rejected kRejected[] = {
    {"gdn", "not supported (Strata has no GatedDeltaNet layers)"},
    {"gdn_norm_out", "not supported (Strata has no GatedDeltaNet layers)"},
    {"gdp_in_proj", "not supported (Strata has no GatedDeltaProduct layers)"},
    {"gdp_qkv", "not supported (Strata has no GatedDeltaProduct layers)"},
};

void check_modules(const ModelConfig& m) {
  const std::vector<std::string> implemented = implemented_modules();
  for (const std::string& name : m.recompute_modules) {
    if (std::find(implemented.begin(), implemented.end(), name) != implemented.end()) {
      if (name == "shared_experts" && !m.moe_shared_expert_intermediate_size)
        throw ConfigError("model.recompute_modules",
                          "shared_experts recomputes the MoE layers' shared experts; the model has none "
                          "(model.moe_shared_expert_intermediate_size is null)");
      if (name == "moe_act" && !m.is_moe())
        throw ConfigError("model.recompute_modules",
                          "moe_act recomputes the MoE experts' activation; the model has no MoE layers "
                          "(model.num_experts is null)");
      if (name == "moe_act" && !m.moe_grouped_gemm)
        throw ConfigError("model.recompute_modules",
                          "moe_act needs model.moe_grouped_gemm: true (Megatron's rule; Strata's experts always "
                          "run one grouped GEMM, so setting it changes nothing else)");
      const bool mla = has_mla_layers(m);
      if (name == "mla_up_proj" && !mla)
        throw ConfigError("model.recompute_modules",
                          "mla_up_proj: needs multi-latent attention layers (model.multi_latent_attention or '+' in "
                          "model.hybrid_layer_pattern), whose up projections it recomputes (Megatron's rule)");
      if (name == "layernorm" && !mla)
        throw ConfigError("model.recompute_modules",
                          "layernorm: acts on multi-latent attention layers' input norm; the model's other norms are "
                          "fused into the following linear (Transformer Engine layout, linear_qkv.layer_norm_weight), "
                          "where Megatron's layernorm recompute does nothing");
      if (name == "moe" && !m.is_moe())
        throw ConfigError("model.recompute_modules",
                          "moe recomputes MoE layers; the model has none (model.num_experts is null)");
      continue;
    }
    const auto r =
        std::find_if(std::begin(kRejected), std::end(kRejected), [&](const Rejected& x) { return name == x.name; });
    if (r != std::end(kRejected)) throw ConfigError("model.recompute_modules", name + ": " + r->why);
    throw ConfigError("model.recompute_modules",
                      "unknown module '" + name +
                          "' (Megatron's: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, mhc, "
                          "gdn, gdn_norm_out; Strata recomputes " + listed(implemented) + ")");
  }
}

void check_full(const ModelConfig& m) {
  if (!m.recompute_method)
    throw ConfigError("model.recompute_method", "required (uniform or block) with model.recompute_granularity full");
  if (!m.recompute_num_layers)
    throw ConfigError("model.recompute_num_layers", "required with model.recompute_granularity full");
  if (*m.recompute_num_layers < 1 || *m.recompute_num_layers > m.num_layers)
    throw ConfigError("model.recompute_num_layers", std::to_string(*m.recompute_num_layers) +
                                                        " must be between 1 and model.num_layers (" +
                                                        std::to_string(m.num_layers) + ")");
}

// Megatron's global_aux_loss keeps a running sum over the step's forwards; a replayed forward
// would see (and advance) it a second time.
void check_moe_replay(const ModelConfig& m, const char* field) {
  for (const MoeLoadBalancingLoss& l : m.moe_load_balancing_losses())
    if (l.type == "global_aux_loss")
      throw ConfigError(field,
                        "recomputing MoE layers with the global_aux_loss load-balancing loss is not supported "
                        "(its running token counts would be advanced twice); drop one of them");
}

}  // namespace

void add_recompute_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  f.add_enum("recompute_granularity", &M::recompute_granularity, kRecomputeGranularityNames,
             "Activation recompute: null (keep every activation), full (whole layers: keep only the input of "
             "each recomputed chunk and re-run its forward in backward; needs recompute_method and "
             "recompute_num_layers) or selective (the modules of recompute_modules).");
  f.add_enum("recompute_method", &M::recompute_method, kRecomputeMethodNames,
             "Which layers full recompute covers: uniform (all layers of a stage/model chunk, in chunks of "
             "recompute_num_layers layers) or block (the first recompute_num_layers layers of each stage/model "
             "chunk, each on its own). Must be null for selective.");
  f.add("recompute_num_layers", &M::recompute_num_layers,
        "Full recompute: layers per chunk (uniform) or recomputed layers per stage/model chunk (block). Must be "
        "null for selective.");
  f.add("recompute_modules", &M::recompute_modules,
        "Selective recompute: the submodules whose activations are dropped after the forward and recomputed in "
        "backward. Strata implements core_attn (what its attention always does: the kernel never stores the "
        "s×s probabilities and recomputes them in backward, so it frees nothing more), mlp (the dense MLP: "
        "keeps its input), moe (the whole MoE layer: keeps its "
        "input), moe_act (the routed experts' activation: keeps the fc1 output and drops the activation and "
        "the fc2 input, recomputed before fc2's backward; needs moe_grouped_gemm) and shared_experts (the MoE "
        "layers' shared-expert MLP: keeps its input) and mhc (mHC: each site's input and aggregation are "
        "dropped and rebuilt per mhc_recompute_layer_num group; needs enable_hyper_connections, not with mlp), "
        "mla_up_proj (multi-latent attention: keeps the latents and recomputes the up projections and RoPE in "
        "backward) and layernorm (multi-latent attention layers' input norm: its output is recomputed in "
        "backward); Megatron's other names (gdn, …) are errors saying why.");
  f.add("distribute_saved_activations", &M::distribute_saved_activations,
        "Split the saved chunk inputs of full recompute over tensor-parallel ranks. Not supported: must be false.");
  f.add("moe_layer_recompute", &M::moe_layer_recompute,
        "Deprecated (Megatron --moe-layer-recompute): selective recompute with moe added to recompute_modules.");
}

void finalize_recompute_config(ModelConfig& m) {
  if (m.moe_layer_recompute) {
    if (m.recompute_granularity == RecomputeGranularity::Full)
      throw ConfigError("model.moe_layer_recompute", "cannot be combined with model.recompute_granularity full");
    if (!m.recompute_granularity) m.recompute_modules.clear();  // the default core_attn is not asked for
    m.recompute_granularity = RecomputeGranularity::Selective;
    if (std::find(m.recompute_modules.begin(), m.recompute_modules.end(), "moe") == m.recompute_modules.end())
      m.recompute_modules.push_back("moe");
  }
  if (m.distribute_saved_activations)
    throw ConfigError("model.distribute_saved_activations",
                      "true is not supported (Strata keeps each recomputed chunk's whole input on every "
                      "tensor-parallel rank; Megatron also forbids it with sequence parallelism)");
  if (!m.recompute_granularity) {
    if (m.recompute_method)
      throw ConfigError("model.recompute_method",
                        "set without model.recompute_granularity (null: nothing is recomputed)");
    if (m.recompute_num_layers)
      throw ConfigError("model.recompute_num_layers",
                        "set without model.recompute_granularity (null: nothing is recomputed)");
    return;
  }
  if (*m.recompute_granularity == RecomputeGranularity::Full) {
    check_full(m);
    if (m.is_moe()) check_moe_replay(m, "model.recompute_granularity");
    return;
  }
  if (m.recompute_method)
    throw ConfigError("model.recompute_method", "must be null with model.recompute_granularity selective");
  if (m.recompute_num_layers)
    throw ConfigError("model.recompute_num_layers", "must be null with model.recompute_granularity selective");
  check_modules(m);
  if (recompute_module(m, "moe")) check_moe_replay(m, "model.recompute_modules");
}

bool recompute_module(const ModelConfig& m, const std::string& module) {
  return m.recompute_granularity == RecomputeGranularity::Selective &&
         std::find(m.recompute_modules.begin(), m.recompute_modules.end(), module) != m.recompute_modules.end();
}

std::string recompute_mode_text(const ModelConfig& m) {
  if (!m.recompute_granularity) return "none";
  if (*m.recompute_granularity == RecomputeGranularity::Full)
    return std::string("full ") + to_string(*m.recompute_method) + " " + std::to_string(*m.recompute_num_layers);
  std::string out = "selective ";
  for (size_t i = 0; i < m.recompute_modules.size(); ++i) out += (i ? "," : "") + m.recompute_modules[i];
  return out;
}

}  // namespace strata
