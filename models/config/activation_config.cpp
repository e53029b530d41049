// The MLP activation fields, rules and MlpActivation (models/config/activation_config.h).
// Reference: megatron/training/argument_utils.py (core_transformer_config_from_args),
// megatron/core/transformer/transformer_config.py (__post_init__), transformer/mlp.py (MLP.forward),
// transformer/moe/experts.py (TEGroupedMLP.forward bias_act_func).
#include "models/config/activation_config.h"

#include <cmath>
#include <string>

#include "models/config/model_config.h"

namespace strata {

using config::ConfigError;

const char* to_string(MlpActivationKind k) {
  switch (k) {
    case MlpActivationKind::GeluErf: return "gelu";
    case MlpActivationKind::GeluTanh: return "gelu_tanh";
    case MlpActivationKind::Swiglu: return "swiglu";
    case MlpActivationKind::QuickGeglu: return "quick_geglu";
    case MlpActivationKind::SquaredRelu: return "squared_relu";
  }
  return "?";
}

MlpActivation mlp_activation(const ModelConfig& m) {
  MlpActivation a;
  if (m.squared_relu) a.kind = MlpActivationKind::SquaredRelu;
  else if (m.quick_geglu) a.kind = MlpActivationKind::QuickGeglu;
  else if (m.swiglu) a.kind = MlpActivationKind::Swiglu;
  else if (m.openai_gelu) a.kind = MlpActivationKind::GeluTanh;
  a.gated = a.kind == MlpActivationKind::Swiglu || a.kind == MlpActivationKind::QuickGeglu;
  if (a.gated) {
    a.linear_offset = m.glu_linear_offset;
    a.clamp = m.activation_func_clamp_value;
  }
  a.fused_weighted_squared_relu = a.kind == MlpActivationKind::SquaredRelu && m.use_fused_weighted_squared_relu;
  return a;
}

void add_activation_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  f.add("quick_geglu", &M::quick_geglu,
        "Quick-GeGLU MLP (gpt-oss; Megatron --quick-geglu): gated like swiglu, linear_fc1 producing [gate | linear] "
        "halves, with the gate quick_gelu(x) = x*sigmoid(1.702*x) instead of SiLU. Not with swiglu or squared_relu.")
      .architecture_defining();
  f.add("glu_linear_offset", &M::glu_linear_offset,
        "Offset added to the linear half of a gated MLP (swiglu or quick_geglu): gate(a)*(b + offset) (gpt-oss: 1.0; "
        "Megatron's glu_linear_offset).")
      .architecture_defining();
  f.add("activation_func_clamp_value", &M::activation_func_clamp_value,
        "Clamp c of a gated MLP's halves before the activation (gpt-oss: 7.0; Megatron's "
        "activation_func_clamp_value): the gate half to at most c, the linear half to [-c, c]; the gradient is 0 "
        "where an input was clamped. Finite and > 0; with swiglu only in an MoE model and with glu_linear_offset 0 "
        "(Megatron's rules). Applies to every MLP of the model (dense, shared and routed experts). null: no clamp.")
      .architecture_defining();
  f.add("squared_relu", &M::squared_relu,
        "Squared-ReLU MLP relu(x)^2 (Nemotron-H, Nemotron-3; Megatron --squared-relu), not gated. Not with swiglu "
        "or quick_geglu.")
      .architecture_defining();
  f.add("use_fused_weighted_squared_relu", &M::use_fused_weighted_squared_relu,
        "The routed experts multiply squared ReLU by the routing probability in one kernel (Megatron's "
        "weighted_squared_relu_impl) instead of the activation followed by the product: the same numbers within "
        "rounding, one activation tensor fewer kept for backward. Needs squared_relu and num_experts; not with "
        "add_bias_linear (Megatron asserts the experts have no bias).");
}

namespace {
std::string num(double v) { return config::format_double(v); }

// The clamp's rules: a gated MLP reads it; finite and > 0; SwiGLU's extra rules (Megatron's
// __post_init__ for activation_func == F.silu with gated_linear_unit).
void check_clamp(const ModelConfig& m, bool gated) {
  if (!m.activation_func_clamp_value) return;
  const double c = *m.activation_func_clamp_value;
  const char* field = "model.activation_func_clamp_value";
  if (!gated)
    throw ConfigError(field, "clamps the two halves of a gated MLP; set model.swiglu or model.quick_geglu "
                             "(Megatron ignores it for a non-gated activation)");
  if (!std::isfinite(c) || c <= 0) throw ConfigError(field, num(c) + " must be finite and > 0");
  if (!m.swiglu) return;
  if (!m.num_experts)
    throw ConfigError(field, "with model.swiglu is only supported in an MoE model (Megatron: "
                             "\"activation_func_clamp_value for SwiGLU is only supported with MoE\")");
  if (m.glu_linear_offset != 0.0)
    throw ConfigError("model.glu_linear_offset",
                      "must be 0 when model.activation_func_clamp_value is set with model.swiglu (Megatron's rule)");
}
}  // namespace

void check_activation_rules(const ModelConfig& m) {
  if (m.squared_relu && m.swiglu)
    throw ConfigError("model.squared_relu", "cannot be combined with model.swiglu (Megatron asserts not --swiglu: "
                                            "the squared-ReLU MLP is not gated)");
  if (m.quick_geglu && m.swiglu)
    throw ConfigError("model.quick_geglu", "cannot be combined with model.swiglu (both choose the gate function "
                                           "of the gated MLP: quick-GeLU or SiLU)");
  if (m.quick_geglu && m.squared_relu)
    throw ConfigError("model.quick_geglu", "cannot be combined with model.squared_relu (pick one activation; "
                                           "Megatron would silently take squared_relu)");
  if (m.openai_gelu && (m.squared_relu || m.quick_geglu))
    throw ConfigError("model.openai_gelu", std::string("cannot be combined with model.") +
                                               (m.squared_relu ? "squared_relu" : "quick_geglu") +
                                               " (openai_gelu chooses GeLU's tanh approximation)");
  const bool gated = m.swiglu || m.quick_geglu;
  if (!std::isfinite(m.glu_linear_offset))
    throw ConfigError("model.glu_linear_offset", num(m.glu_linear_offset) + " must be finite");
  if (m.glu_linear_offset != 0.0 && !gated)
    throw ConfigError("model.glu_linear_offset", "is added to the linear half of a gated MLP; set model.quick_geglu "
                                                 "or model.swiglu (Megatron ignores it for a non-gated activation)");
  check_clamp(m, gated);
  if (!m.use_fused_weighted_squared_relu) return;
  const char* fused = "model.use_fused_weighted_squared_relu";
  if (!m.squared_relu)
    throw ConfigError(fused, "is the routed experts' squared-ReLU kernel; it needs model.squared_relu (Megatron "
                             "ignores it for another activation)");
  if (!m.num_experts)
    throw ConfigError(fused, "applies to the routed experts; the model has none (model.num_experts is null)");
  if (m.add_bias_linear)
    throw ConfigError(fused, "needs experts without biases: set model.add_bias_linear to false (Megatron asserts "
                             "\"Bias is not supported with fused weighted squared relu\")");
}

}  // namespace strata
