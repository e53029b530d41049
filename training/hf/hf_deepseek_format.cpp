// DeepseekV3ForCausalLM's model rules and config.json keys (training/hf/hf_deepseek_format.h).
// Reference: transformers models/deepseek_v3/configuration_deepseek_v3.py (DeepseekV3Config: the
// keys and their defaults), modeling_deepseek_v3.py (DeepseekV3Attention, DeepseekV3TopkRouter,
// DeepseekV3MoE, DeepseekV3DecoderLayer: layer i is MoE iff i >= first_k_dense_replace),
// modeling_rope_utils.py (_compute_yarn_parameters, yarn_get_mscale, yarn_apply_mscale,
// standardize_rope_params); Megatron-LM megatron/core/transformer/moe/moe_utils.py
// (group_limited_topk, topk_routing_with_score_function).
#include "training/hf/hf_deepseek_format.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "kernels/rotary.h"
#include "training/hf/hf_json_read.h"
#include "training/hf/hf_moe_format.h"
#include "training/hf/hf_yarn_read.h"

namespace strata::hf::detail {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

// DeepseekV3RMSNorm's default eps, which q_a_layernorm and kv_a_layernorm keep.
constexpr double kLatentNormEps = 1e-6;

bool nearly(double a, double b) {
  return std::abs(a - b) <= 8 * std::numeric_limits<double>::epsilon() * std::max(std::abs(a), std::abs(b));
}

// The k of a layer map [0]·k + [1]·(L − k) (num_layers for a dense model), or -1 for another map.
int64_t first_k_dense(const ResolvedModelConfig& m) {
  if (!m->num_experts) return m->num_layers;
  int64_t k = 0;
  while (k < m->num_layers && !m.is_moe_layer(k)) ++k;
  for (int64_t i = k; i < m->num_layers; ++i)
    if (!m.is_moe_layer(i)) return -1;
  return k;
}

// The RoPE and normalization options of MLA that DeepseekV3Attention computes.
std::string attention_incompatibility(const ResolvedModelConfig& m) {
  std::ostringstream why;
  const RopeType rope = mla_rope_type(*m);
  if (!m->qk_layernorm)
    why << "model.qk_layernorm=false: DeepseekV3ForCausalLM normalizes MLA's latents (q_a_layernorm, kv_a_layernorm)";
  else if (m->normalization != Normalization::RMSNorm)
    why << "model.normalization=" << strata::to_string(m->normalization) << " is not DeepSeek-V3's RMSNorm";
  else if (m->layernorm_epsilon != kLatentNormEps)
    why << "model.layernorm_epsilon=" << m->layernorm_epsilon << ": DeepseekV3ForCausalLM's latent norms "
        << "(q_a_layernorm, kv_a_layernorm) use eps 1e-6 whatever rms_norm_eps says, Strata one epsilon for every norm";
  else if (!m->swiglu)
    why << "model.swiglu=false is not DeepSeek-V3's SiLU-gated MLP";
  else if (m->add_bias_linear)
    why << "model.add_bias_linear=true: DeepSeek-V3's linear layers have no biases";
  else if (m->apply_residual_connection_post_layernorm)
    why << "model.apply_residual_connection_post_layernorm=true is not DeepSeek-V3's residual";
  else if (!m->uses_rotary())
    why << "model.position_embedding_type=" << strata::to_string(m->position_embedding_type)
        << ": DeepSeek-V3's MLA rotates its qk_pos_emb_head_dim channels";
  else if (m->use_rope_scaling || m->rotary_seq_len_interpolation_factor)
    why << (m->use_rope_scaling ? "model.use_rope_scaling" : "model.rotary_seq_len_interpolation_factor")
        << " has no DeepseekV3ForCausalLM spelling (its RoPE is \"default\" or \"yarn\")";
  else if (rope == RopeType::Rope && m->rotary_percent != 1.0)
    why << "model.rotary_percent=" << m->rotary_percent << ": DeepSeek-V3 rotates all qk_rope_head_dim channels";
  else if (rope == RopeType::Rope && kernels::yarn_get_mscale(m->rotary_scaling_factor, m->mscale_all_dim) != 1.0)
    why << "model.mscale_all_dim=" << m->mscale_all_dim << " scales MLA's softmax with rope_type rope; "
        << "transformers applies mscale_all_dim only with rope_type yarn";
  return why.str();
}

// The MoE options DeepseekV3MoE computes (sigmoid router, bias, groups, shared experts).
std::string moe_incompatibility(const ResolvedModelConfig& m) {
  std::ostringstream why;
  if (!m->num_experts) return "";
  if (m->moe_router_score_function != MoeScoreFunction::Sigmoid)
    why << "model.moe_router_score_function=" << strata::to_string(m->moe_router_score_function)
        << ": DeepseekV3ForCausalLM routes by sigmoid scores";
  else if (first_k_dense(m) < 0)
    why << "model.moe_layer_freq: DeepseekV3ForCausalLM's MoE layers are the layers from first_k_dense_replace on "
           "(dense layers first, then MoE layers only)";
  else if (const std::string groups_why = router_groups_incompatibility(m, "DeepseekV3TopkRouter"); !groups_why.empty())
    why << groups_why;
  else if (!m->moe_shared_expert_intermediate_size)
    why << "model.moe_shared_expert_intermediate_size is not set: DeepseekV3ForCausalLM's MoE layers have shared "
           "experts (n_shared_experts >= 1)";
  else if (*m->moe_shared_expert_intermediate_size % m.moe_ffn() != 0)
    why << "model.moe_shared_expert_intermediate_size=" << *m->moe_shared_expert_intermediate_size
        << " is not n_shared_experts × moe_ffn_hidden_size (" << m.moe_ffn() << ")";
  else if (m->moe_shared_expert_gate)
    why << "model.moe_shared_expert_gate=true: DeepseekV3ForCausalLM's shared experts have no gate";
  else if (m->moe_apply_probs_on_input)
    why << "model.moe_apply_probs_on_input=true: DeepseekV3ForCausalLM weights the experts' outputs";
  else if (m->moe_router_force_load_balancing)
    why << "model.moe_router_force_load_balancing=true: a benchmark mode (random routing) no transformers model "
           "computes";
  return why.str();
}

// The "yarn" dict of rope_parameters. transformers multiplies cos/sin by attention_factor, or
// without it by get_mscale(f, mscale) / get_mscale(f, mscale_all_dim) when both are non-zero, else
// by get_mscale(f): written where that rule would not give Strata's concentration factor.
ojson yarn_json(const ResolvedModelConfig& m) {
  const double f = m->rotary_scaling_factor;
  ojson rope = {{"rope_theta", static_cast<double>(m->rotary_base)},
                {"rope_type", "yarn"},
                {"factor", f},
                {"original_max_position_embeddings", m->yarn_original_max_position_embeddings},
                {"beta_fast", m->yarn_beta_fast},
                {"beta_slow", m->yarn_beta_slow},
                {"mscale", m->mscale},
                {"mscale_all_dim", m->mscale_all_dim}};
  if (!m->yarn_correction_range_round_to_int) rope["truncate"] = false;
  const double ours = kernels::yarn_concentration_factor(f, m->mscale, m->mscale_all_dim);
  const double theirs = m->mscale != 0.0 && m->mscale_all_dim != 0.0 ? ours : kernels::yarn_get_mscale(f);
  if (!nearly(ours, theirs)) rope["attention_factor"] = ours;
  return rope;
}

void moe_config_keys(const ResolvedModelConfig& m, ojson& j) {
  const bool moe = m->num_experts.has_value();
  const int64_t k = moe ? m->moe_router_topk : 1;
  j["moe_intermediate_size"] = moe ? m.moe_ffn() : m.ffn();
  j["n_routed_experts"] = moe ? *m->num_experts : 1;
  j["n_shared_experts"] = moe ? *m->moe_shared_expert_intermediate_size / m.moe_ffn() : 1;
  j["num_experts_per_tok"] = k;
  j["n_group"] = m->moe_router_num_groups.value_or(1);
  j["topk_group"] = m->moe_router_group_topk.value_or(1);
  j["first_k_dense_replace"] = first_k_dense(m);
  j["routed_scaling_factor"] = m->moe_router_topk_scaling_factor.value_or(1.0);
  j["norm_topk_prob"] = k > 1;  // Megatron renormalises sigmoid top-k weights exactly when k > 1
  j["output_router_logits"] = false;
}

// The MLA sizes, norms and activation (DeepseekV3Attention, DeepseekV3MLP).
void read_mla(const json& j, const std::string& file, ModelConfig& m) {
  m.hidden_size = get_int(j, "hidden_size", file);
  m.num_layers = get_int(j, "num_hidden_layers", file);
  m.num_attention_heads = get_int(j, "num_attention_heads", file);
  const int64_t kv = opt_int(j, "num_key_value_heads", file).value_or(m.num_attention_heads);
  STRATA_CHECK(kv == m.num_attention_heads, file, ": num_key_value_heads ", kv, " is not num_attention_heads ",
               m.num_attention_heads, " (DeepseekV3Attention's keys are per head)");
  m.ffn_hidden_size = get_int(j, "intermediate_size", file);
  m.multi_latent_attention = true;
  m.q_lora_rank = opt_int(j, "q_lora_rank", file);
  m.kv_lora_rank = get_int(j, "kv_lora_rank", file);
  m.qk_head_dim = get_int(j, "qk_nope_head_dim", file);
  m.qk_pos_emb_head_dim = get_int(j, "qk_rope_head_dim", file);
  m.v_head_dim = get_int(j, "v_head_dim", file);
  m.qk_layernorm = true;  // q_a_layernorm, kv_a_layernorm
  m.normalization = Normalization::RMSNorm;
  m.layernorm_epsilon = opt_double(j, "rms_norm_eps", 1e-6, file);
  STRATA_CHECK(m.layernorm_epsilon == kLatentNormEps, file, ": rms_norm_eps ", m.layernorm_epsilon,
               " is not supported: DeepseekV3ForCausalLM's latent norms (q_a_layernorm, kv_a_layernorm) keep eps "
               "1e-6, and Strata has one model.layernorm_epsilon for every norm");
  m.swiglu = true;
  const std::string act = opt_string(j, "hidden_act", "silu", file);
  STRATA_CHECK(act == "silu", file, ": hidden_act '", act, "' is not supported (DeepSeek-V3's silu → SwiGLU)");
  STRATA_CHECK(!opt_bool(j, "attention_bias", false, file), file, ": attention_bias=true is not supported "
               "(Strata's MLA projections have no biases)");
  STRATA_CHECK(opt_bool(j, "rope_interleave", true, file), file, ": rope_interleave=false (rotate_half on the RoPE "
               "channels) is not supported; Strata's MLA rotates interleaved pairs, transformers' default");
  // DeepSeek's released checkpoints are FP8 blocks with weight_scale_inv tensors.
  STRATA_CHECK(!j.contains("quantization_config") || j.at("quantization_config").is_null(), file,
               ": quantization_config ", j.contains("quantization_config") ? j.at("quantization_config").dump() : "",
               " is not supported: strata import reads unquantized weights (dequantize the FP8 checkpoint to bf16 "
               "first)");
  m.add_bias_linear = false;
  m.add_qkv_bias = false;
  m.attention_dropout = opt_double(j, "attention_dropout", 0.0, file);
  m.max_position_embeddings = get_int(j, "max_position_embeddings", file);
  m.untie_embeddings_and_output_weights = !opt_bool(j, "tie_word_embeddings", false, file);
  // DeepseekV3Config's default is 1; the import keeps the layers only when the file holds them.
  const int64_t mtp = opt_int(j, "num_nextn_predict_layers", file).value_or(1);
  STRATA_CHECK(mtp >= 0, file, ": num_nextn_predict_layers must be >= 0, got ", mtp);
  m.mtp_num_layers = mtp > 0 ? std::optional<int64_t>(mtp) : std::nullopt;
}

// transformers' "yarn" (after standardize_rope_params: a top-level original_max_position_embeddings
// wins; a null factor is max_position_embeddings / original; beta_fast / beta_slow default to 32 / 1
// when missing, null or 0; truncate defaults to true, null is false). mscale_all_dim is kept (the
// softmax scale); mscale is the one that gives transformers' cos/sin factor (mscale_for_attention_factor).
void read_yarn(const json& r, const json& j, const std::string& what, const std::string& file, ModelConfig& m) {
  m.rope_type = RopeType::Yarn;
  const double f = read_yarn_frequencies(r, j, what, file, m);
  const double mscale = opt_double(r, "mscale", 0.0, file), all_dim = opt_double(r, "mscale_all_dim", 0.0, file);
  m.mscale_all_dim = all_dim;  // yarn_apply_mscale: the softmax scale's get_mscale(f, mscale_all_dim)²
  const bool given = r.contains("attention_factor") && !r.at("attention_factor").is_null();
  if (!given && mscale != 0.0 && all_dim != 0.0) {
    m.mscale = mscale;  // transformers' ratio is Megatron's concentration factor
    return;
  }
  const double a = given ? get_double(r, "attention_factor", file) : kernels::yarn_get_mscale(f);
  m.mscale = mscale_for_attention_factor(a, f, all_dim, what);
}

// rope_scaling (DeepSeek's own configs, "type") or rope_parameters (transformers 5), as
// RotaryEmbeddingConfigMixin reads them: "default" or "yarn" over qk_rope_head_dim channels.
void read_rope(const json& j, const std::string& file, ModelConfig& m) {
  const bool legacy = j.contains("rope_scaling") && !j.at("rope_scaling").is_null();
  const char* key = legacy ? "rope_scaling" : "rope_parameters";
  const json r = j.contains(key) && !j.at(key).is_null() ? j.at(key) : json::object();
  const std::string what = file + ": " + key + " " + r.dump();
  STRATA_CHECK(r.is_object(), what, " is not an object");
  for (auto it = r.begin(); it != r.end(); ++it)
    STRATA_CHECK(!it.value().is_object(), what, " gives layer type '", it.key(), "' its own RoPE, which is not "
                 "supported (one RoPE for every layer)");
  const double theta = opt_double(r, "rope_theta", opt_double(j, "rope_theta", 1e4, file), file);
  STRATA_CHECK(theta == std::floor(theta) && theta > 0, file, ": rope_theta ", theta,
               " is not a positive integer (model.rotary_base is an integer)");
  m.rotary_base = static_cast<int64_t>(theta);
  const double partial = opt_double(r, "partial_rotary_factor", opt_double(j, "partial_rotary_factor", 1.0, file), file);
  STRATA_CHECK(partial == 1.0, file, ": partial_rotary_factor ", partial, " is not supported (DeepSeek-V3 rotates "
               "all qk_rope_head_dim channels)");
  m.position_embedding_type = PositionEmbeddingType::Rope;
  const std::string type = r.contains("rope_type") ? opt_string(r, "rope_type", "default", file)
                                                   : opt_string(r, "type", "default", file);
  if (type == "yarn") return read_yarn(r, j, what, file, m);
  STRATA_CHECK(type == "default", what, " is not supported (DeepSeek-V3's MLA takes plain RoPE, rope_type "
               "\"default\", or \"yarn\")");
  m.rope_type = RopeType::Rope;
}

// DeepseekV3MoE: layers from first_k_dense_replace on (none when it is >= num_hidden_layers).
void read_moe(const json& j, const std::string& file, ModelConfig& m) {
  const int64_t first_dense = opt_int(j, "first_k_dense_replace", file).value_or(3);
  STRATA_CHECK(first_dense >= 0, file, ": first_k_dense_replace must be >= 0, got ", first_dense);
  if (first_dense >= m.num_layers) return;  // a dense model
  const std::optional<int64_t> local = opt_int(j, "num_local_experts", file);
  const int64_t experts = local ? *local : get_int(j, "n_routed_experts", file);
  const int64_t k = opt_int(j, "num_experts_per_tok", file).value_or(8);
  STRATA_CHECK(experts >= 1 && k >= 1 && k <= experts, file, ": num_experts_per_tok ", k, " is not in [1, "
               "n_routed_experts ", experts, "]");
  for (const auto& [key, want] : {std::pair<const char*, const char*>{"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"}})
    STRATA_CHECK(opt_string(j, key, want, file) == want, file, ": ", key, " '", opt_string(j, key, want, file),
                 "' is not supported (DeepseekV3ForCausalLM computes ", key, " ", want, ")");
  // DeepSeek's own key (transformers ignores it): its layer rule is i >= first_k_dense_replace and
  // i % moe_layer_freq == 0, transformers' the first part only.
  const int64_t every = opt_int(j, "moe_layer_freq", file).value_or(1);
  STRATA_CHECK(every == 1, file, ": moe_layer_freq ", every, " is not supported (DeepseekV3ForCausalLM makes every "
               "layer from first_k_dense_replace on an MoE layer)");
  const bool normalised = opt_bool(j, "norm_topk_prob", true, file);
  STRATA_CHECK(normalised == (k > 1), file, ": norm_topk_prob ", normalised ? "true" : "false",
               " with num_experts_per_tok ", k, " is not supported: Megatron (Strata) renormalises sigmoid top-k "
               "weights exactly when k > 1 (norm_topk_prob true for k > 1, false for k = 1)");
  read_router_groups(j, file, experts, k, "DeepseekV3TopkRouter", m);
  const int64_t shared = opt_int(j, "n_shared_experts", file).value_or(1);
  STRATA_CHECK(shared >= 1, file, ": n_shared_experts ", shared, " is not supported (Strata's DeepSeek-V3 MoE layers "
               "have shared experts)");
  m.num_experts = experts;
  m.moe_router_topk = k;
  m.moe_ffn_hidden_size = get_int(j, "moe_intermediate_size", file);
  m.moe_shared_expert_intermediate_size = shared * *m.moe_ffn_hidden_size;
  m.moe_layer_freq = {"1"};
  if (first_dense > 0) {
    m.moe_layer_freq.assign(static_cast<size_t>(m.num_layers), "1");
    for (int64_t i = 0; i < first_dense; ++i) m.moe_layer_freq[static_cast<size_t>(i)] = "0";
  }
  m.moe_router_score_function = MoeScoreFunction::Sigmoid;
  m.moe_router_pre_softmax = false;
  m.moe_router_enable_expert_bias = true;  // e_score_correction_bias
  const double scale = opt_double(j, "routed_scaling_factor", 2.5, file);
  m.moe_router_topk_scaling_factor = scale != 1.0 ? std::optional<double>(scale) : std::nullopt;
  m.moe_router_dtype = MoeRouterDtype::Fp32;  // DeepseekV3TopkRouter: F.linear in f32
  // DeepSeek's own config.json names its sequence-wise balance loss (transformers ignores it).
  const double alpha = opt_double(j, "aux_loss_alpha", 0.0, file);
  m.moe_router_load_balancing_type = {opt_bool(j, "seq_aux", false, file) ? "seq_aux_loss" : "aux_loss"};
  m.moe_aux_loss_coeff = {alpha};
}

}  // namespace

std::string router_groups_incompatibility(const ResolvedModelConfig& m, const char* router) {
  std::ostringstream why;
  const int64_t experts = *m->num_experts, k = m->moe_router_topk;
  const int64_t groups = m->moe_router_num_groups.value_or(1), kept = m->moe_router_group_topk.value_or(groups);
  if (experts / groups < 2)
    why << "model.num_experts=" << experts << " in " << groups << " group(s): " << router << " ranks each group "
        << "by its top-2 scores, so a group needs at least 2 experts";
  else if (kept < groups && k / kept != 2)
    why << "model.moe_router_group_topk=" << kept << ": transformers' " << router << " ranks the groups by the "
        << "sum of their top-2 scores, Megatron's group_limited_topk by the sum of the top moe_router_topk // "
        << "moe_router_group_topk = " << k / kept << "; they agree only when that quotient is 2";
  return why.str();
}

void read_router_groups(const json& j, const std::string& file, int64_t experts, int64_t k, const char* router,
                        ModelConfig& m) {
  const int64_t groups = opt_int(j, "n_group", file).value_or(1), kept = opt_int(j, "topk_group", file).value_or(1);
  STRATA_CHECK(groups >= 1 && experts % groups == 0, file, ": n_group ", groups, " does not divide the ", experts,
               " routed experts");
  STRATA_CHECK(experts / groups >= 2, file, ": n_group ", groups, " leaves ", experts / groups, " expert(s) per "
               "group; ", router, " ranks each group by its top-2 scores");
  STRATA_CHECK(kept >= 1 && kept <= groups, file, ": topk_group ", kept, " is not in [1, n_group ", groups, "]");
  if (kept == groups) return;  // every group kept: no limit
  STRATA_CHECK(k / kept == 2, file, ": n_group ", groups, " with topk_group ", kept, " and num_experts_per_tok ", k,
               ": transformers ranks the groups by the sum of their top-2 scores, Megatron's group_limited_topk "
               "(Strata) by the sum of their top num_experts_per_tok // topk_group = ", k / kept,
               "; they agree only when that quotient is 2");
  m.moe_router_num_groups = groups;
  m.moe_router_group_topk = kept;
}

void deepseek_config_from_json(const json& j, const std::string& file, ModelConfig& m) {
  read_mla(j, file, m);
  read_rope(j, file, m);
  read_moe(j, file, m);
}

std::optional<std::string> deepseek_mtp_unexportable(const ResolvedModelConfig& m) {
  if (m->mtp_depths() == 0) return std::nullopt;
  if (m->mtp_use_repeated_layer)
    return std::string("model.mtp_use_repeated_layer=true: DeepSeek's layout has one layer per MTP depth");
  if (!m->num_experts)
    return std::string("a dense model's MTP layers have no DeepSeek layout (DeepSeek's layer num_hidden_layers + k "
                       "is an MoE layer)");
  return std::nullopt;
}

int64_t deepseek_export_mtp_layers(const ResolvedModelConfig& m) {
  return deepseek_mtp_unexportable(m) ? 0 : m->mtp_depths();
}

std::string deepseek_incompatibility(const ResolvedModelConfig& m) {
  if (!m->multi_latent_attention)
    return "model.multi_latent_attention=false: DeepseekV3ForCausalLM's attention is multi-latent attention";
  const std::string attention = attention_incompatibility(m);
  return attention.empty() ? moe_incompatibility(m) : attention;
}

void deepseek_config_json(const ResolvedModelConfig& m, ojson& j) {
  const MlaDims d = mla_dims(*m);
  j["hidden_size"] = m->hidden_size;
  j["intermediate_size"] = m.ffn();
  j["num_hidden_layers"] = m->num_layers;
  j["num_attention_heads"] = m->num_attention_heads;
  j["num_key_value_heads"] = m->num_attention_heads;  // MLA: one key per head
  j["q_lora_rank"] = d.q_lora_rank > 0 ? ojson(d.q_lora_rank) : ojson(nullptr);
  j["kv_lora_rank"] = d.kv_lora_rank;
  j["qk_nope_head_dim"] = d.qk_head_dim;
  j["qk_rope_head_dim"] = d.qk_pos_emb_head_dim;
  j["v_head_dim"] = d.v_head_dim;
  j["qk_head_dim"] = d.q_head_dim();      // DeepseekV3Config.__post_init__ derives (and saves) both
  j["head_dim"] = d.qk_pos_emb_head_dim;
  moe_config_keys(m, j);
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = m->layernorm_epsilon;
  j["rope_parameters"] = mla_rope_type(*m) == RopeType::Yarn
                             ? yarn_json(m)
                             : ojson{{"rope_theta", static_cast<double>(m->rotary_base)}, {"rope_type", "default"}};
  j["rope_interleave"] = true;  // Strata's MLA rotates interleaved pairs (multi_latent_attention.h)
  j["max_position_embeddings"] = m.max_positions();
  j["attention_bias"] = false;
  j["attention_dropout"] = m->attention_dropout;
  j["initializer_range"] = m->init_method_std;
  j["tie_word_embeddings"] = !m->untie_embeddings_and_output_weights;
  j["num_nextn_predict_layers"] = deepseek_export_mtp_layers(m);
}

void deepseek_strata_json(const ResolvedModelConfig& m, ojson& s) {
  if (m->num_experts) {
    s["moe"] = moe_strata_json(m);
    s["moe_router_enable_expert_bias"] = m->moe_router_enable_expert_bias;
  }
  if (deepseek_export_mtp_layers(m) > 0) s["mtp_loss_scaling_factor"] = m->mtp_loss_scaling_factor;
}

void deepseek_strata_from_json(const json& s, const std::string& where, ModelConfig& m) {
  if (m.num_experts && s.contains("moe")) moe_strata_from_json(s.at("moe"), where + " \"moe\"", m);
  if (m.num_experts) m.moe_router_enable_expert_bias = opt_bool(s, "moe_router_enable_expert_bias", true, where);
  if (m.mtp_num_layers) m.mtp_loss_scaling_factor = opt_double(s, "mtp_loss_scaling_factor", 0.1, where);
}

std::vector<std::string> deepseek_export_notes(const ResolvedModelConfig& m) {
  std::vector<std::string> notes;
  if (m->num_experts) {
    for (const std::string& n : moe_export_notes(m))
      if (n.rfind("model.moe_router_dtype=", 0) != 0) notes.push_back(n);  // transformers' gate is f32, below
    if (m->moe_router_dtype && *m->moe_router_dtype != MoeRouterDtype::Fp32)
      notes.push_back(std::string("model.moe_router_dtype=") + to_string(*m->moe_router_dtype) +
                      " is not exported: DeepseekV3ForCausalLM computes its router in f32");
    for (size_t i = 0; i < m->moe_router_load_balancing_type.size(); ++i)
      if (m->moe_router_load_balancing_type[i] == "aux_loss" && m->moe_aux_loss_coeff.at(i) != 0.0)
        notes.push_back("model.moe_router_load_balancing_type aux_loss is training-only: DeepseekV3Config has no "
                        "router_aux_loss_coef (kept under \"strata\" for import)");
    if (!m->moe_router_enable_expert_bias)
      notes.push_back("model.moe_router_enable_expert_bias=false: e_score_correction_bias is written as zeros "
                      "(DeepseekV3TopkRouter always adds it; zeros change no choice)");
  }
  if (const auto why = deepseek_mtp_unexportable(m))
    notes.push_back("the multi-token-prediction layers (mtp.layers.*, model.mtp_num_layers " +
                    std::to_string(m->mtp_depths()) + ") are not exported: " + *why);
  if (const int64_t d = deepseek_export_mtp_layers(m); d > 0)
    notes.push_back("the " + std::to_string(d) + " MTP layer(s) are written as DeepSeek stores them, model.layers." +
                    std::to_string(m->num_layers) + (d > 1 ? "-" + std::to_string(m->num_layers + d - 1) : "") +
                    " (num_nextn_predict_layers " + std::to_string(d) + "); transformers' DeepseekV3ForCausalLM does "
                    "not run them and lists them as unexpected keys when it loads the directory");
  return notes;
}

}  // namespace strata::hf::detail
