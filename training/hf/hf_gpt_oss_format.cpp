// GptOssForCausalLM's model rules and config.json keys (training/hf/hf_gpt_oss_format.h).
// Reference: transformers models/gpt_oss/configuration_gpt_oss.py (GptOssConfig: keys, defaults,
// the default layer_types and YaRN dict of __post_init__, default_theta 150000),
// modeling_gpt_oss.py (GptOssExperts._apply_gate, GptOssTopKRouter, GptOssAttention's sinks and
// sliding_window), masking_utils.py (sliding_window_overlay); Megatron-LM
// megatron/core/transformer/utils.py (is_layer_window_attention), megatron/core/transformer/moe/
// moe_utils.py (topk_routing_with_score_function: post-softmax top-k).
#include "training/hf/hf_gpt_oss_format.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "training/hf/hf_json_read.h"
#include "training/hf/hf_moe_format.h"
#include "training/hf/hf_rope.h"

namespace strata::hf::detail {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

// Megatron's quick_gelu x·σ(1.702·x) (fused_bias_geglu.py), transformers' swiglu_alpha default.
constexpr double kQuickGeluAlpha = 1.702;
constexpr double kDefaultTheta = 150000.0;  // GptOssConfig.default_theta

// W of the windowed layers (window_size [W − 1, 0]), or 0 when no layer has a bounded window.
int64_t sliding_window(const ResolvedModelConfig& m) {
  for (int64_t i = 0; i < m->num_layers; ++i)
    if (const auto w = m.attention_window(i); w && w->left >= 0) return w->left + 1;
  return 0;
}
bool windowed(const ResolvedModelConfig& m, int64_t layer) {
  const auto w = m.attention_window(layer);
  return w && w->left >= 0;
}

// Norms, positions, biases, activation and attention softmax.
std::string layer_incompatibility(const ResolvedModelConfig& m) {
  std::ostringstream why;
  if (m->normalization != Normalization::RMSNorm)
    why << "model.normalization=" << strata::to_string(m->normalization) << " is not gpt-oss's RMSNorm";
  else if (m->apply_layernorm_1p)
    why << "model.apply_layernorm_1p=true: gpt-oss's norms are plain RMSNorms (not exported)";
  else if (m->qk_layernorm)
    why << "model.qk_layernorm=true: gpt-oss's attention has no q/k norms";
  else if (m->apply_residual_connection_post_layernorm)
    why << "model.apply_residual_connection_post_layernorm=true is not gpt-oss's residual";
  else if (!m->uses_rotary())
    why << "model.position_embedding_type=" << strata::to_string(m->position_embedding_type)
        << " is not gpt-oss's rope (or yarn)";
  else if (m->rotary_interleaved)
    why << "model.rotary_interleaved=true is not gpt-oss's rotate_half RoPE";
  else if (m->rotary_percent != 1.0)
    why << "model.rotary_percent=" << m->rotary_percent << " is not gpt-oss's full rotary (1.0)";
  else if (!m->no_rope_freq.empty())
    why << "model.no_rope_freq: every gpt-oss layer applies RoPE";
  else if (!m->add_bias_linear)
    why << "model.add_bias_linear=false: gpt-oss's projections, router and experts have biases";
  else if (!m->quick_geglu)
    why << "model.quick_geglu=false: gpt-oss's experts are the quick GeGLU (" << (m->swiglu ? "not SwiGLU" : "gated")
        << ")";
  else if (m->glu_linear_offset != 1.0)
    why << "model.glu_linear_offset=" << m->glu_linear_offset << ": gpt-oss's experts compute (up + 1)";
  else if (m->squared_relu)
    why << "model.squared_relu=true is not gpt-oss's activation";
  else if (m->softmax_type != SoftmaxType::Learnable)
    why << "model.softmax_type=" << config::enum_to_string<SoftmaxType>(kSoftmaxTypeNames, m->softmax_type)
        << ": gpt-oss's attention has learnable sinks (learnable)";
  return why.str();
}

// The MoE options GptOssMLP computes: every layer MoE, softmax over the top-k biased logits.
std::string moe_incompatibility(const ResolvedModelConfig& m) {
  std::ostringstream why;
  if (!m->num_experts) return "model.num_experts is not set: GptOssForCausalLM is a mixture-of-experts model";
  for (int64_t i = 0; i < m->num_layers; ++i)
    if (!m.is_moe_layer(i)) return "model.moe_layer_freq makes layer " + std::to_string(i) + " dense: every "
                                   "GptOssForCausalLM layer is an MoE layer";
  if (m->moe_router_score_function != MoeScoreFunction::Softmax)
    why << "model.moe_router_score_function=" << strata::to_string(m->moe_router_score_function)
        << ": GptOssForCausalLM routes by a softmax over the top-k logits";
  else if (m->moe_router_pre_softmax)
    why << "model.moe_router_pre_softmax=true: GptOssForCausalLM takes the softmax over the k selected logits";
  else if (m->moe_router_enable_expert_bias)
    why << "model.moe_router_enable_expert_bias=true: GptOssForCausalLM has no expert bias";
  else if (m->moe_router_num_groups || m->moe_router_group_topk)
    why << "model.moe_router_num_groups=" << m->moe_router_num_groups.value_or(0)
        << " (group-limited routing) has no GptOssForCausalLM equivalent";
  else if (m->moe_router_topk_scaling_factor && *m->moe_router_topk_scaling_factor != 1.0)
    why << "model.moe_router_topk_scaling_factor=" << *m->moe_router_topk_scaling_factor
        << ": GptOssForCausalLM does not scale the routing weights";
  else if (m->moe_shared_expert_intermediate_size)
    why << "model.moe_shared_expert_intermediate_size=" << *m->moe_shared_expert_intermediate_size
        << ": GptOssForCausalLM has no shared experts";
  else if (m->moe_apply_probs_on_input)
    why << "model.moe_apply_probs_on_input=true: GptOssForCausalLM weights the experts' outputs";
  else if (m->moe_router_force_load_balancing)
    why << "model.moe_router_force_load_balancing=true: a benchmark mode (random routing) no transformers model "
           "computes";
  else if (m->moe_latent_size)
    why << "model.moe_latent_size=" << *m->moe_latent_size << ": GptOssForCausalLM has no latent MoE projections";
  return why.str();
}

double aux_loss_coef(const ResolvedModelConfig& m) {
  for (const MoeLoadBalancingLoss& l : m->moe_load_balancing_losses())
    if (l.type == "aux_loss") return l.coeff;
  return 0.0;
}

// layer_types (GptOssConfig's default: sliding on the even layers) as 1 = sliding window.
std::vector<int64_t> read_layer_types(const json& j, const std::string& file, int64_t layers) {
  std::vector<int64_t> map;
  if (!j.contains("layer_types") || j.at("layer_types").is_null()) {
    for (int64_t i = 0; i < layers; ++i) map.push_back((i + 1) % 2 != 0 ? 1 : 0);
    return map;
  }
  const json& v = j.at("layer_types");
  STRATA_CHECK(v.is_array() && static_cast<int64_t>(v.size()) == layers, file, ": layer_types must list the ", layers,
               " layers, got ", v.dump());
  for (const json& t : v) {
    const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
    STRATA_CHECK(type == "sliding_attention" || type == "full_attention", file, ": layer_types entry '", type,
                 "' is neither sliding_attention nor full_attention");
    map.push_back(type == "sliding_attention" ? 1 : 0);
  }
  return map;
}

// The window fields for a layer map (1 = window of w keys): Megatron's int N when the map is its
// rule (every N-th layer full), else the 0/1 list.
void set_window(const std::vector<int64_t>& map, int64_t w, ModelConfig& m) {
  int64_t windowed = 0;
  for (int64_t x : map) windowed += x;
  if (windowed == 0) return;  // every layer full
  m.window_size = {w - 1, 0};
  if (windowed == static_cast<int64_t>(map.size())) return;  // every layer windowed
  for (int64_t n = 2; n <= static_cast<int64_t>(map.size()); ++n) {
    bool same = true;
    for (size_t i = 0; i < map.size() && same; ++i) same = map[i] == ((static_cast<int64_t>(i) + 1) % n != 0 ? 1 : 0);
    if (same) {
      m.window_attn_skip_freq = {std::to_string(n)};
      return;
    }
  }
  m.window_attn_skip_freq.clear();
  for (int64_t x : map) m.window_attn_skip_freq.push_back(std::to_string(x));
}

// The experts' activation: swiglu_alpha must be Megatron's 1.702; swiglu_limit (Infinity: no clamp).
void read_activation(const json& j, const std::string& file, ModelConfig& m) {
  const double alpha = opt_double(j, "swiglu_alpha", kQuickGeluAlpha, file);
  STRATA_CHECK(alpha == kQuickGeluAlpha, file, ": swiglu_alpha ", alpha, " is not supported (Megatron's quick_geglu "
               "is x·σ(1.702·x))");
  const double limit = opt_double(j, "swiglu_limit", 7.0, file);
  STRATA_CHECK(limit > 0, file, ": swiglu_limit ", limit, " must be positive");
  const std::optional<double> clamp =
      limit == std::numeric_limits<double>::infinity() ? std::nullopt : std::optional<double>(limit);
  m.quick_geglu = true;
  m.glu_linear_offset = 1.0;
  m.activation_func_clamp_value = clamp;
  m.swiglu = false;  // quick_geglu is the gated MLP's gate (not with swiglu)
}

// The RoPE dict; a config without one takes GptOssConfig's default (YaRN factor 32 over 4096).
void read_positions(const json& j, const std::string& file, ModelConfig& m) {
  m.position_embedding_type = PositionEmbeddingType::Rope;
  const bool given = (j.contains("rope_parameters") && !j.at("rope_parameters").is_null()) ||
                     (j.contains("rope_scaling") && !j.at("rope_scaling").is_null());
  if (given) return read_rope_parameters(j, kDefaultTheta, "GptOssForCausalLM", file, m);
  json d = j;
  d["rope_parameters"] = {{"rope_type", "yarn"},        {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                          {"truncate", false}, {"original_max_position_embeddings", 4096}};
  read_rope_parameters(d, kDefaultTheta, "GptOssForCausalLM", file, m);
}

}  // namespace

std::string gpt_oss_incompatibility(const ResolvedModelConfig& m) {
  if (m->multi_latent_attention)
    return "model.multi_latent_attention=true: GptOssForCausalLM's attention is grouped-query attention";
  const std::string why = moe_incompatibility(m);
  return why.empty() ? layer_incompatibility(m) : why;
}

void gpt_oss_config_json(const ResolvedModelConfig& m, ojson& j) {
  j["hidden_size"] = m->hidden_size;
  j["intermediate_size"] = m.moe_ffn();
  j["num_hidden_layers"] = m->num_layers;
  j["num_attention_heads"] = m->num_attention_heads;
  j["num_key_value_heads"] = m.query_groups();
  j["head_dim"] = m.head_dim();
  j["num_local_experts"] = *m->num_experts;
  j["num_experts_per_tok"] = m->moe_router_topk;
  ojson types = ojson::array();
  for (int64_t i = 0; i < m->num_layers; ++i) types.push_back(windowed(m, i) ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  // transformers builds the sliding mask whether a layer uses it or not, so it needs a window even
  // when no layer has one: the whole context then.
  const int64_t w = sliding_window(m);
  j["sliding_window"] = w > 0 ? w : m.max_positions();
  j["rope_parameters"] = rope_parameters_json(m);
  j["max_position_embeddings"] = m.max_positions();
  j["rms_norm_eps"] = m->layernorm_epsilon;
  j["hidden_act"] = "silu";  // unused by GptOssExperts
  j["swiglu_alpha"] = kQuickGeluAlpha;
  const std::optional<double> clamp = m->activation_func_clamp_value;
  j["swiglu_limit"] = clamp ? ojson(*clamp) : ojson{{"__float__", "Infinity"}};
  j["attention_bias"] = true;
  j["attention_dropout"] = m->attention_dropout;
  j["initializer_range"] = m->init_method_std;
  j["tie_word_embeddings"] = !m->untie_embeddings_and_output_weights;
  j["router_aux_loss_coef"] = aux_loss_coef(m);
  j["output_router_logits"] = false;
}

void gpt_oss_strata_json(const ResolvedModelConfig& m, ojson& s) {
  s["ffn_hidden_size"] = m.ffn();
  if (!m->window_attn_skip_freq.empty()) s["window_attn_skip_freq"] = m->window_attn_skip_freq;
  if (m->enable_gpt_oss) s["enable_gpt_oss"] = true;
  s["moe"] = moe_strata_json(m);
}

void gpt_oss_config_from_json(const json& j, const std::string& file, ModelConfig& m) {
  STRATA_CHECK(!j.contains("quantization_config") || j.at("quantization_config").is_null(), file,
               ": quantization_config ", j.contains("quantization_config") ? j.at("quantization_config").dump() : "",
               " is not supported: strata import reads unquantized weights (dequantize the MXFP4 experts to bf16 "
               "first)");
  m.hidden_size = get_int(j, "hidden_size", file);
  m.num_layers = get_int(j, "num_hidden_layers", file);
  m.num_attention_heads = get_int(j, "num_attention_heads", file);
  m.num_query_groups = opt_int(j, "num_key_value_heads", file).value_or(m.num_attention_heads);
  m.group_query_attention = *m.num_query_groups != m.num_attention_heads;
  m.kv_channels = j.contains("head_dim") ? opt_int(j, "head_dim", file) : std::optional<int64_t>(64);
  m.max_position_embeddings = opt_int(j, "max_position_embeddings", file).value_or(131072);
  m.normalization = Normalization::RMSNorm;
  m.layernorm_epsilon = opt_double(j, "rms_norm_eps", 1e-5, file);
  STRATA_CHECK(opt_bool(j, "attention_bias", true, file), file, ": attention_bias=false is not supported "
               "(Megatron's add_bias_linear gives the attention, the router and the experts biases together)");
  m.add_bias_linear = true;
  m.add_qkv_bias = false;
  m.attention_dropout = opt_double(j, "attention_dropout", 0.0, file);
  m.untie_embeddings_and_output_weights = !opt_bool(j, "tie_word_embeddings", false, file);
  m.softmax_type = SoftmaxType::Learnable;  // self_attn.sinks
  read_positions(j, file, m);
  read_activation(j, file, m);
  const std::vector<int64_t> layers = read_layer_types(j, file, m.num_layers);
  const std::optional<int64_t> w = j.contains("sliding_window") ? opt_int(j, "sliding_window", file) : 128;
  bool any = false;
  for (int64_t x : layers) any = any || x;
  STRATA_CHECK(!any || (w && *w >= 1), file, ": sliding_window must be a positive integer for the "
               "sliding_attention layers, got ", j.contains("sliding_window") ? j.at("sliding_window").dump() : "");
  if (any) set_window(layers, *w, m);
  const int64_t experts = opt_int(j, "num_local_experts", file).value_or(opt_int(j, "num_experts", file).value_or(128));
  const int64_t k = opt_int(j, "num_experts_per_tok", file).value_or(4);
  STRATA_CHECK(experts >= 1 && k >= 2 && k <= experts, file, ": num_experts_per_tok ", k, " is not in [2, "
               "num_local_experts ", experts, "] (gpt-oss's softmax over one selected logit has no Megatron "
               "equivalent: Megatron refuses post-softmax top-1 routing)");
  m.num_experts = experts;
  m.moe_router_topk = k;
  m.moe_ffn_hidden_size = get_int(j, "intermediate_size", file);
  m.ffn_hidden_size = *m.moe_ffn_hidden_size;  // no dense layer; "strata" restores an export's
  m.moe_layer_freq = {"1"};
  m.moe_router_score_function = MoeScoreFunction::Softmax;
  m.moe_router_pre_softmax = false;
  // transformers adds the aux loss only with output_router_logits.
  const double coef = opt_double(j, "router_aux_loss_coef", 0.001, file);
  m.moe_router_load_balancing_type = {"aux_loss"};
  m.moe_aux_loss_coeff = {opt_bool(j, "output_router_logits", false, file) ? coef : 0.0};
}

void gpt_oss_strata_from_json(const json& s, const std::string& where, ModelConfig& m) {
  m.ffn_hidden_size = opt_int(s, "ffn_hidden_size", where).value_or(*m.ffn_hidden_size);
  if (s.contains("window_attn_skip_freq") && !m.window_size.empty()) {
    ModelConfig written = m;
    try {
      written.window_attn_skip_freq = s.at("window_attn_skip_freq").get<std::vector<std::string>>();
    } catch (const json::exception& e) {
      STRATA_THROW(where, ": window_attn_skip_freq: ", e.what());
    }
    // The spelling the export recorded, where it gives the layers layer_types lists.
    if (attention_window_layers(written) == attention_window_layers(m)) m.window_attn_skip_freq = written.window_attn_skip_freq;
  }
  m.enable_gpt_oss = opt_bool(s, "enable_gpt_oss", false, where);
  if (s.contains("moe")) moe_strata_from_json(s.at("moe"), where + " \"moe\"", m);
}

std::vector<std::string> gpt_oss_export_notes(const ResolvedModelConfig& m) {
  std::vector<std::string> notes = moe_export_notes(m);
  if (m->mtp_depths() > 0)
    notes.push_back("the " + std::to_string(m->mtp_depths()) + " multi-token-prediction depth(s) (mtp.layers.*) are "
                    "training-only and not exported: GptOssForCausalLM has no MTP layers");
  return notes;
}

}  // namespace strata::hf::detail
