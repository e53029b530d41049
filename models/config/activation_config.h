// The MLP activation part of the `model` config section: the fields of gpt-oss's and Nemotron's
// activations (quick_geglu, glu_linear_offset, activation_func_clamp_value, squared_relu,
// use_fused_weighted_squared_relu; Megatron's names and defaults), their rules, and MlpActivation:
// the one description of the activation, derived from a section's fields by mlp_activation(), that
// the dense MLP, the MoE experts, the planner's activation counts and the exports read.
// The members live in ModelConfig (models/config/model_config.h); swiglu and openai_gelu are its own.
// Reference: megatron/training/argument_utils.py (core_transformer_config_from_args: --swiglu →
// gated silu; --squared-relu → squared_relu, not with --swiglu; --quick-geglu → gated quick_gelu),
// megatron/core/transformer/transformer_config.py (glu_linear_offset, activation_func_clamp_value,
// use_fused_weighted_squared_relu, and __post_init__'s clamp rules for SwiGLU),
// megatron/core/transformer/mlp.py (MLP.forward: glu()), moe/experts.py (TEGroupedMLP bias_act_func).
#pragma once
#include <cstdint>
#include <optional>

#include "core/config_table.h"

namespace strata {

struct ModelConfig;

enum class MlpActivationKind {
  GeluErf,     // 0.5·x·(1 + erf(x/√2)): Megatron's default F.gelu
  GeluTanh,    // GeLU's tanh approximation (openai_gelu)
  Swiglu,      // gated: silu(a)·b (swiglu)
  QuickGeglu,  // gated: quick_gelu(a)·b, quick_gelu(x) = x·σ(1.702·x) (quick_geglu)
  SquaredRelu  // relu(x)² (squared_relu)
};
const char* to_string(MlpActivationKind k);

// The activation between linear_fc1 and linear_fc2 of every MLP of a model: the dense MLP, the
// shared experts and the routed experts.
struct MlpActivation {
  MlpActivationKind kind = MlpActivationKind::GeluErf;
  // Gated (Swiglu, QuickGeglu): linear_fc1 produces [gate | linear] halves, 2·ffn wide, and the
  // activation is gate(a')·(b' + linear_offset) with a' = min(a, c), b' = clamp(b, -c, c) for a
  // clamp c (Megatron's glu() with glu_linear_offset and activation_func_clamp_value).
  bool gated = false;
  double linear_offset = 0.0;
  std::optional<double> clamp;
  // The routed experts multiply squared ReLU by the routing probability in one kernel (Megatron's
  // weighted_squared_relu_impl); the same numbers as the activation followed by the product,
  // within rounding. Only with SquaredRelu.
  bool fused_weighted_squared_relu = false;

  // linear_fc1's output width for an MLP of `ffn` columns: 2·ffn gated, else ffn.
  int64_t fc1_width(int64_t ffn) const { return gated ? 2 * ffn : ffn; }
  // Blocks of linear_fc1's rows that tensor parallelism shards separately ([gate_r; linear_r]).
  int64_t fc1_blocks() const { return gated ? 2 : 1; }
  bool operator==(const MlpActivation&) const = default;
};

// The activation a model section's fields describe (swiglu, openai_gelu, quick_geglu,
// squared_relu, glu_linear_offset, activation_func_clamp_value, use_fused_weighted_squared_relu).
// The section is expected resolved (its rules checked), so at most one kind is chosen.
MlpActivation mlp_activation(const ModelConfig& m);

// Adds quick_geglu, glu_linear_offset, activation_func_clamp_value, squared_relu and
// use_fused_weighted_squared_relu to the model section's table.
void add_activation_fields(config::SectionFields<ModelConfig>& f);
// The cross-field rules: one activation at a time (swiglu, quick_geglu, squared_relu, openai_gelu),
// the offset and clamp only where a gated MLP reads them (and Megatron's SwiGLU clamp rules), the
// fused weighted squared ReLU only with squared_relu experts. ConfigError naming the field.
void check_activation_rules(const ModelConfig& m);

}  // namespace strata
