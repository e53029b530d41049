// NemotronHForCausalLM's model rules and config.json keys (training/hf/hf_nemotron_h_format.h).
// Reference: transformers models/nemotron_h/configuration_nemotron_h.py (NemotronHConfig: keys,
// defaults, the legacy aliases of __post_init__, _pattern_to_list), modeling_nemotron_h.py
// (NemotronHMamba2Mixer, NemotronHRMSNormGated, NemotronHAttention, NemotronHMLP, NemotronHMoE,
// NemotronHTopkRouter), configuration_utils.py (_LEGACY_LAYER_TYPE_REMAP); Megatron-LM
// megatron/core/ssm/mamba_mixer.py (d_conv 4, conv_bias, the gated norm's eps 1e-5),
// megatron/core/transformer/moe/moe_utils.py (topk_routing_with_score_function).
#include "training/hf/hf_nemotron_h_format.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "models/config/hybrid_pattern.h"
#include "models/config/mamba_config.h"
#include "training/hf/hf_deepseek_format.h"
#include "training/hf/hf_json_read.h"
#include "training/hf/hf_moe_format.h"

namespace strata::hf::detail {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

// Megatron's MambaMixer gated norm (ExtendedRMSNorm eps=1e-5); NemotronHRMSNormGated takes
// layer_norm_epsilon, which the block norms share.
constexpr double kGatedNormEps = 1e-5;
// Megatron's MambaMixer d_conv (Strata's MambaDims::conv_kernel).
constexpr int64_t kConvKernel = 4;

bool has(const std::string& layers, char symbol) { return layers.find(symbol) != std::string::npos; }

// The transformers 5 name of a pattern symbol, and back (the legacy names too).
const char* block_type(char symbol) {
  switch (symbol) {
    case hybrid::kMamba: return "linear_attention";
    case hybrid::kAttention: return "full_attention";
    case hybrid::kMlp: return "mlp";
    case hybrid::kMoe: return "moe";
  }
  STRATA_INTERNAL_ASSERT(false, "no NemotronH block type for symbol ", symbol);
  return "";
}
char symbol_of(const std::string& type, const std::string& file) {
  if (type == "linear_attention" || type == "mamba") return hybrid::kMamba;
  if (type == "full_attention" || type == "attention") return hybrid::kAttention;
  if (type == "mlp") return hybrid::kMlp;
  if (type == "moe") return hybrid::kMoe;
  STRATA_THROW(file, ": layers_block_type entry '", type, "' is not a NemotronH block type (linear_attention, "
               "full_attention, mlp or moe; the legacy mamba, attention)");
}

// The norms, positions, biases and activations of the layers the pattern has.
std::string layer_incompatibility(const ResolvedModelConfig& m, const std::string& layers) {
  std::ostringstream why;
  const bool mlps = has(layers, hybrid::kMlp) || has(layers, hybrid::kMoe);
  if (m->normalization != Normalization::RMSNorm)
    why << "model.normalization=" << strata::to_string(m->normalization) << " is not NemotronH's RMSNorm";
  else if (m->apply_layernorm_1p)
    why << "model.apply_layernorm_1p=true: NemotronH's norms are plain RMSNorms (not exported)";
  else if (m->position_embedding_type != PositionEmbeddingType::None)
    why << "model.position_embedding_type=" << strata::to_string(m->position_embedding_type)
        << ": NemotronH's attention has no position embedding (none)";
  else if (m->add_bias_linear)
    why << "model.add_bias_linear=true: NemotronH's linear layers have no biases";
  else if (m->add_qkv_bias)
    why << "model.add_qkv_bias=true: NemotronH's q/k/v projections have no biases";
  else if (m->qk_layernorm)
    why << "model.qk_layernorm=true: NemotronH's attention has no q/k norms";
  else if (m->multi_latent_attention)
    why << "model.multi_latent_attention=true: NemotronH's attention layers are multi-head attention";
  else if (m->apply_residual_connection_post_layernorm)
    why << "model.apply_residual_connection_post_layernorm=true is not NemotronH's residual";
  else if (!m->window_size.empty())
    why << "model.window_size: NemotronH's attention has no sliding window (NemotronHAttention ignores "
           "sliding_window)";
  else if (m->softmax_type != SoftmaxType::Vanilla)
    why << "model.softmax_type=" << config::enum_to_string<SoftmaxType>(kSoftmaxTypeNames, m->softmax_type)
        << ": NemotronH's attention softmax is vanilla (no sinks)";
  else if (has(layers, hybrid::kMamba) && m->layernorm_epsilon != kGatedNormEps)
    why << "model.layernorm_epsilon=" << m->layernorm_epsilon << ": NemotronH's Mamba gated norm takes "
        << "layer_norm_epsilon, Megatron's (Strata's) keeps 1e-5";
  else if (mlps && m->swiglu)
    why << "model.swiglu=true: NemotronH's MLPs and experts are relu2 (up, squared ReLU, down), not gated";
  else if (mlps && !m->squared_relu)
    why << "model.squared_relu=false: NemotronH's MLPs and experts are relu2 (squared ReLU)";
  else if (m->quick_geglu)
    why << "model.quick_geglu=true is not NemotronH's relu2";
  else if (m->activation_func_clamp_value)
    why << "model.activation_func_clamp_value=" << *m->activation_func_clamp_value << ": NemotronH does not clamp its "
        << "activations";
  return why.str();
}

// The MoE options NemotronHMoE computes (sigmoid router, bias, groups, shared experts, latent).
std::string moe_incompatibility(const ResolvedModelConfig& m) {
  std::ostringstream why;
  if (m->moe_router_score_function != MoeScoreFunction::Sigmoid)
    why << "model.moe_router_score_function=" << strata::to_string(m->moe_router_score_function)
        << ": NemotronHForCausalLM routes by sigmoid scores";
  else if (const std::string groups = router_groups_incompatibility(m, "NemotronHTopkRouter"); !groups.empty())
    why << groups;
  else if (!m->moe_shared_expert_intermediate_size)
    why << "model.moe_shared_expert_intermediate_size is not set: NemotronH's MoE layers have a shared expert";
  else if (m->moe_shared_expert_gate)
    why << "model.moe_shared_expert_gate=true: NemotronH's shared expert has no gate";
  else if (m->moe_apply_probs_on_input)
    why << "model.moe_apply_probs_on_input=true: NemotronH weights the experts' outputs";
  else if (m->moe_router_force_load_balancing)
    why << "model.moe_router_force_load_balancing=true: a benchmark mode (random routing) no transformers model "
           "computes";
  return why.str();
}

const char* hf_bool(bool b) { return b ? "true" : "false"; }

// The block types (layers_block_type, or the older hybrid_override_pattern string) as pattern symbols.
std::string read_layers(const json& j, const std::string& file) {
  std::string layers;
  if (j.contains("layers_block_type") && !j.at("layers_block_type").is_null()) {
    const json& v = j.at("layers_block_type");
    STRATA_CHECK(v.is_array(), file, ": layers_block_type must be a list of block types, got ", v.dump());
    for (const json& t : v) {
      STRATA_CHECK(t.is_string(), file, ": layers_block_type entry ", t.dump(), " is not a string");
      layers += symbol_of(t.get<std::string>(), file);
    }
  } else {
    const std::string pattern = opt_string(j, "hybrid_override_pattern", "", file);
    STRATA_CHECK(!pattern.empty(), file, ": neither layers_block_type nor hybrid_override_pattern is given "
                 "(NemotronHConfig's default layers are not a model)");
    for (char c : pattern) {
      STRATA_CHECK(c == hybrid::kMamba || c == hybrid::kAttention || c == hybrid::kMlp || c == hybrid::kMoe, file,
                   ": hybrid_override_pattern '", pattern, "' has '", std::string(1, c), "' (NemotronH's symbols are "
                   "M, *, - and E)");
      layers += c;
    }
  }
  STRATA_CHECK(!layers.empty(), file, ": layers_block_type is empty");
  return layers;
}

// A key or its older alias (NemotronHConfig.__post_init__ takes mamba_n_groups, mamba_d_conv, …).
json key_or_alias(const json& j, const char* key, const char* alias) {
  if (j.contains(alias) && !j.at(alias).is_null()) return j.at(alias);
  if (j.contains(key)) return j.at(key);
  return json();
}
json with_key(const char* key, const json& v) {
  json o = json::object();
  if (!v.is_null()) o[key] = v;
  return o;
}

// NemotronHMamba2Mixer's keys.
void read_mamba(const json& j, const std::string& file, ModelConfig& m) {
  m.mamba_num_heads = opt_int(j, "mamba_num_heads", file).value_or(128);
  m.mamba_head_dim = opt_int(j, "mamba_head_dim", file).value_or(64);
  m.mamba_state_dim = opt_int(j, "ssm_state_size", file).value_or(128);
  m.mamba_num_groups = opt_int(with_key("n_groups", key_or_alias(j, "n_groups", "mamba_n_groups")), "n_groups", file)
                           .value_or(8);
  m.mamba_chunk_size =
      opt_int(with_key("chunk_size", key_or_alias(j, "chunk_size", "mamba_chunk_size")), "chunk_size", file).value_or(128);
  const int64_t conv =
      opt_int(with_key("conv_kernel", key_or_alias(j, "conv_kernel", "mamba_d_conv")), "conv_kernel", file).value_or(4);
  STRATA_CHECK(conv == kConvKernel, file, ": conv_kernel ", conv, " is not supported (Megatron's MambaMixer, and "
               "Strata's, convolve over 4 positions)");
  const bool conv_bias =
      opt_bool(with_key("use_conv_bias", key_or_alias(j, "use_conv_bias", "mamba_conv_bias")), "use_conv_bias", true, file);
  STRATA_CHECK(conv_bias, file, ": use_conv_bias=false is not supported (Megatron's conv1d has a bias)");
  const std::string act = opt_string(j, "mamba_hidden_act", "silu", file);
  STRATA_CHECK(act == "silu", file, ": mamba_hidden_act '", act, "' is not supported (Megatron's MambaMixer: silu)");
  STRATA_CHECK(!opt_bool(j, "use_bias", false, file), file, ": use_bias=true (in_proj / out_proj biases) is not "
               "supported");
  const json limit = key_or_alias(j, "time_step_limit", "mamba_dt_limit");
  if (!limit.is_null()) {
    const bool open = limit.is_array() && limit.size() == 2 && limit[0].is_number() && limit[1].is_number() &&
                      limit[0].get<double>() <= 0.0 && limit[1].get<double>() == std::numeric_limits<double>::infinity();
    STRATA_CHECK(open, file, ": time_step_limit ", limit.dump(), " is not supported (Megatron's dt is not clamped: "
                 "(0.0, inf))");
  }
  const double eps = opt_double(j, "layer_norm_epsilon", 1e-5, file);
  STRATA_CHECK(eps == kGatedNormEps, file, ": layer_norm_epsilon ", eps, " is not supported with Mamba layers: "
               "NemotronH's gated norm takes it, Megatron's (Strata's) keeps 1e-5");
}

// NemotronHMoE's keys (the E layers).
void read_moe(const json& j, const std::string& file, ModelConfig& m) {
  const std::optional<int64_t> local = opt_int(j, "num_local_experts", file);
  const int64_t experts = local ? *local : opt_int(j, "n_routed_experts", file).value_or(8);
  const int64_t k = opt_int(j, "num_experts_per_tok", file).value_or(2);
  STRATA_CHECK(experts >= 1 && k >= 1 && k <= experts, file, ": num_experts_per_tok ", k, " is not in [1, "
               "n_routed_experts ", experts, "]");
  const bool normalised = opt_bool(j, "norm_topk_prob", true, file);
  STRATA_CHECK(normalised == (k > 1), file, ": norm_topk_prob ", hf_bool(normalised), " with num_experts_per_tok ",
               k, " is not supported: Megatron (Strata) renormalises sigmoid top-k weights exactly when k > 1");
  read_router_groups(j, file, experts, k, "NemotronHTopkRouter", m);
  STRATA_CHECK(!opt_bool(j, "mlp_bias", false, file), file, ": mlp_bias=true is not supported");
  m.num_experts = experts;
  m.moe_router_topk = k;
  m.moe_ffn_hidden_size = opt_int(j, "moe_intermediate_size", file).value_or(7688);
  m.moe_shared_expert_intermediate_size = opt_int(j, "moe_shared_expert_intermediate_size", file).value_or(7688);
  STRATA_CHECK(*m.moe_shared_expert_intermediate_size > 0, file, ": moe_shared_expert_intermediate_size must be "
               "positive (NemotronHMoE always has its shared expert)");
  m.moe_latent_size = opt_int(j, "moe_latent_size", file);
  m.moe_router_score_function = MoeScoreFunction::Sigmoid;
  m.moe_router_pre_softmax = false;
  m.moe_router_enable_expert_bias = true;  // e_score_correction_bias
  const double scale = opt_double(j, "routed_scaling_factor", 1.0, file);
  m.moe_router_topk_scaling_factor = scale != 1.0 ? std::optional<double>(scale) : std::nullopt;
  m.moe_router_dtype = MoeRouterDtype::Fp32;  // NemotronHTopkRouter: F.linear in f32
}

}  // namespace

std::string nemotron_h_incompatibility(const ResolvedModelConfig& m) {
  if (!m->is_hybrid())
    return "model.hybrid_layer_pattern is not set: NemotronHForCausalLM is a hybrid model (Mamba, attention, MLP "
           "and MoE layers)";
  const std::string& layers = m.hybrid_pattern().layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    const char c = layers[i];
    if (c != hybrid::kMamba && c != hybrid::kAttention && c != hybrid::kMlp && c != hybrid::kMoe)
      return "model.hybrid_layer_pattern has '" + std::string(1, c) + "' at layer " + std::to_string(i) +
             ": NemotronH's layers are M, *, - and E";
  }
  const std::string why = layer_incompatibility(m, layers);
  if (!why.empty() || !has(layers, hybrid::kMoe)) return why;
  return moe_incompatibility(m);
}

void nemotron_h_config_json(const ResolvedModelConfig& m, ojson& j) {
  const std::string& layers = m.hybrid_pattern().layers;
  j["hidden_size"] = m->hidden_size;
  ojson types = ojson::array();
  for (char c : layers) types.push_back(block_type(c));
  j["layers_block_type"] = types;
  j["num_attention_heads"] = m->num_attention_heads;
  j["num_key_value_heads"] = m.query_groups();
  j["head_dim"] = m.head_dim();
  j["max_position_embeddings"] = m.max_positions();
  j["attention_bias"] = false;
  j["attention_dropout"] = m->attention_dropout;
  j["intermediate_size"] = m.ffn();
  j["mlp_hidden_act"] = "relu2";
  j["mlp_bias"] = false;
  const MambaDims md = mamba_dims(*m);
  j["mamba_num_heads"] = md.heads;
  j["mamba_head_dim"] = md.head_dim;
  j["n_groups"] = md.groups;
  j["ssm_state_size"] = md.state;
  j["chunk_size"] = md.chunk;
  j["conv_kernel"] = md.conv_kernel;
  if (md.d_inner % m->hidden_size == 0) j["expand"] = md.d_inner / m->hidden_size;  // unused by the modeling code
  j["mamba_hidden_act"] = "silu";
  j["use_conv_bias"] = true;
  j["use_bias"] = false;
  // transformers 5's spelling of (0.0, inf) (configuration_utils.py _encode_special_floats).
  j["time_step_limit"] = ojson::array({0.0, ojson{{"__float__", "Infinity"}}});
  if (has(layers, hybrid::kMoe)) {
    j["n_routed_experts"] = *m->num_experts;
    j["num_experts_per_tok"] = m->moe_router_topk;
    j["moe_intermediate_size"] = m.moe_ffn();
    j["moe_shared_expert_intermediate_size"] = *m->moe_shared_expert_intermediate_size;
    j["n_shared_experts"] = 1;  // NemotronHMoE's shared expert is one MLP of the size above
    j["moe_latent_size"] = m->moe_latent_size ? ojson(*m->moe_latent_size) : ojson(nullptr);
    j["n_group"] = m->moe_router_num_groups.value_or(1);
    j["topk_group"] = m->moe_router_group_topk.value_or(1);
    j["routed_scaling_factor"] = m->moe_router_topk_scaling_factor.value_or(1.0);
    j["norm_topk_prob"] = m->moe_router_topk > 1;  // Megatron renormalises sigmoid top-k weights exactly when k > 1
  }
  j["num_nextn_predict_layers"] = 0;
  j["layer_norm_epsilon"] = m->layernorm_epsilon;
  j["residual_in_fp32"] = m->fp32_residual_connection;
  j["hidden_dropout"] = m->hidden_dropout;
  j["initializer_range"] = m->init_method_std;
  j["tie_word_embeddings"] = !m->untie_embeddings_and_output_weights;
}

void nemotron_h_strata_json(const ResolvedModelConfig& m, ojson& s) {
  s["hybrid_layer_pattern"] = m.hybrid_pattern().main;  // with its `|` segments
  if (!m->num_experts) return;
  s["moe"] = moe_strata_json(m);
  s["moe_router_enable_expert_bias"] = m->moe_router_enable_expert_bias;
}

void nemotron_h_config_from_json(const json& j, const std::string& file, ModelConfig& m) {
  const std::string layers = read_layers(j, file);
  m.hybrid_layer_pattern = layers;
  m.num_layers = static_cast<int64_t>(layers.size());
  m.hidden_size = get_int(j, "hidden_size", file);
  m.num_attention_heads = opt_int(j, "num_attention_heads", file).value_or(32);
  m.num_query_groups = opt_int(j, "num_key_value_heads", file).value_or(m.num_attention_heads);
  m.group_query_attention = *m.num_query_groups != m.num_attention_heads;
  m.kv_channels = opt_int(j, "head_dim", file).value_or(128);  // NemotronHConfig's default
  // The remote-code configs of the first Nemotron-H releases name it attention_head_dim, which
  // transformers 5 does not read: refused where it would give another head size than head_dim.
  const std::optional<int64_t> legacy = opt_int(j, "attention_head_dim", file);
  STRATA_CHECK(!legacy || *legacy == *m.kv_channels, file, ": attention_head_dim ", legacy.value_or(0),
               " differs from the head_dim transformers uses (", *m.kv_channels, j.contains("head_dim") ? "" :
               ", NemotronHConfig's default", "); set head_dim");
  m.max_position_embeddings = opt_int(j, "max_position_embeddings", file).value_or(4096);
  m.position_embedding_type = PositionEmbeddingType::None;
  m.normalization = Normalization::RMSNorm;
  m.layernorm_epsilon = opt_double(j, "layer_norm_epsilon", 1e-5, file);
  m.add_bias_linear = false;
  m.add_qkv_bias = false;
  m.swiglu = false;
  m.attention_dropout = opt_double(j, "attention_dropout", 0.0, file);
  m.hidden_dropout = opt_double(j, "hidden_dropout", 0.0, file);
  m.fp32_residual_connection = opt_bool(j, "residual_in_fp32", false, file);
  m.untie_embeddings_and_output_weights = !opt_bool(j, "tie_word_embeddings", false, file);
  m.ffn_hidden_size = opt_int(j, "intermediate_size", file).value_or(21504);
  if (has(layers, hybrid::kMamba)) read_mamba(j, file, m);
  if (has(layers, hybrid::kMlp) || has(layers, hybrid::kMoe)) {
    const std::string act = opt_string(j, "mlp_hidden_act", "relu2", file);
    STRATA_CHECK(act == "relu2", file, ": mlp_hidden_act '", act, "' is not supported (NemotronH's relu2: "
                 "model.squared_relu)");
    m.squared_relu = true;
    STRATA_CHECK(!opt_bool(j, "mlp_bias", false, file), file, ": mlp_bias=true is not supported");
  }
  if (has(layers, hybrid::kMoe)) read_moe(j, file, m);
}

void nemotron_h_strata_from_json(const json& s, const std::string& where, ModelConfig& m) {
  const std::string pattern = opt_string(s, "hybrid_layer_pattern", "", where);
  if (!pattern.empty()) {
    std::string layers;
    for (char c : pattern)
      if (c != hybrid::kPipe) layers += c;
    STRATA_CHECK(layers == *m.hybrid_layer_pattern, where, ": hybrid_layer_pattern '", pattern,
                 "' does not have the layers of layers_block_type ('", *m.hybrid_layer_pattern, "')");
    m.hybrid_layer_pattern = pattern;
  }
  if (m.num_experts && s.contains("moe")) moe_strata_from_json(s.at("moe"), where + " \"moe\"", m);
  if (m.num_experts) m.moe_router_enable_expert_bias = opt_bool(s, "moe_router_enable_expert_bias", true, where);
}

std::vector<std::string> nemotron_h_export_notes(const ResolvedModelConfig& m) {
  std::vector<std::string> notes;
  if (m->num_experts) {
    for (const std::string& n : moe_export_notes(m))
      if (n.rfind("model.moe_router_dtype=", 0) != 0) notes.push_back(n);  // transformers' gate is f32, below
    if (m->moe_router_dtype && *m->moe_router_dtype != MoeRouterDtype::Fp32)
      notes.push_back(std::string("model.moe_router_dtype=") + to_string(*m->moe_router_dtype) +
                      " is not exported: NemotronHForCausalLM computes its router in f32");
    for (size_t i = 0; i < m->moe_router_load_balancing_type.size(); ++i)
      if (m->moe_router_load_balancing_type[i] != "none" && m->moe_aux_loss_coeff.at(i) != 0.0)
        notes.push_back("model.moe_router_load_balancing_type " + m->moe_router_load_balancing_type[i] +
                        " is training-only: NemotronHConfig has no key for it (kept under \"strata\" for import)");
    if (!m->moe_router_enable_expert_bias)
      notes.push_back("model.moe_router_enable_expert_bias=false: e_score_correction_bias is written as zeros "
                      "(NemotronHTopkRouter always adds it; zeros change no choice)");
  }
  if (m->mtp_depths() > 0)
    notes.push_back("the " + std::to_string(m->mtp_depths()) + " multi-token-prediction depth(s) (mtp.layers.*, the "
                    "pattern after '/') are not exported: transformers' NemotronHForCausalLM has no MTP layers");
  return notes;
}

}  // namespace strata::hf::detail
