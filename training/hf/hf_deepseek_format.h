// DeepseekV3ForCausalLM (transformers' deepseek_v3): which Strata model configs it expresses and its
// config.json keys in both directions (used by training/hf/hf_families.cpp and hf_format.cpp; the
// tensors are training/hf/hf_deepseek_map.h).
//   model.multi_latent_attention  ⇄ the family itself (every layer MLA)
//   q_lora_rank (null: q_proj) / kv_lora_rank / qk_head_dim / qk_pos_emb_head_dim / v_head_dim
//                                 ⇄ q_lora_rank / kv_lora_rank / qk_nope_head_dim / qk_rope_head_dim / v_head_dim
//   ffn_hidden_size (dense layers) ⇄ intermediate_size; moe_ffn_hidden_size ⇄ moe_intermediate_size
//   num_experts ⇄ n_routed_experts; moe_router_topk ⇄ num_experts_per_tok
//   moe_shared_expert_intermediate_size = n_shared_experts · moe_intermediate_size
//   moe_layer_freq [0]·k + [1]·(L − k) ⇄ first_k_dense_replace k (k ≥ L: a dense model)
//   moe_router_num_groups / moe_router_group_topk ⇄ n_group / topk_group (null ⇄ 1 / 1)
//   moe_router_topk_scaling_factor ⇄ routed_scaling_factor; sigmoid scores; expert bias ⇄
//   e_score_correction_bias; norm_topk_prob true for top-k > 1 (Megatron renormalises sigmoid
//   top-k weights then, and never for top-1: norm_topk_prob false)
//   rotary_base, rope_type rope ⇄ rope_parameters "default"; rope_type yarn with
//   rotary_scaling_factor, yarn_original_max_position_embeddings, yarn_beta_fast / _slow,
//   yarn_correction_range_round_to_int, mscale, mscale_all_dim ⇄ "yarn" (factor,
//   original_max_position_embeddings, beta_fast, beta_slow, truncate, mscale, mscale_all_dim, and
//   attention_factor where transformers' own rule would give another concentration factor)
//   mtp_num_layers ⇄ num_nextn_predict_layers (DeepSeek's MTP layers after the decoder layers)
// Semantics checked against transformers 5.25 (modeling_deepseek_v3.py, modeling_rope_utils.py):
// MLA's softmax scale (qk_nope + qk_rope)^-0.5 · yarn_get_mscale(factor, mscale_all_dim)², cos/sin
// times the concentration factor, interleaved RoPE pairs (rope_interleave true), latent norms
// with eps 1e-6 (DeepseekV3RMSNorm's default, whatever rms_norm_eps says: so Strata's one
// model.layernorm_epsilon must be 1e-6), the router's group ranking (the sum of each group's
// top-2 biased scores; Megatron's group_limited_topk sums the top moe_router_topk //
// moe_router_group_topk: the same exactly when that quotient is 2, or when the group limit keeps
// every group), the router in f32 (model.moe_router_dtype fp32 on import).
// Details and the refusals: docs/formats.md, "DeepseekV3ForCausalLM".
// Reference: transformers models/deepseek_v3/{configuration,modeling}_deepseek_v3.py,
// modeling_rope_utils.py (_compute_yarn_parameters, yarn_apply_mscale, standardize_rope_params);
// Megatron-LM megatron/core/transformer/moe/moe_utils.py (group_limited_topk,
// topk_routing_with_score_function), multi_latent_attention.py.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/config/model_config.h"

namespace strata::hf::detail {

// Why the finalized model config is not a DeepseekV3ForCausalLM (names the field), or "".
std::string deepseek_incompatibility(const ResolvedModelConfig& m);
// Why its MTP layers have no DeepseekV3 layout (model.mtp_use_repeated_layer, a dense model), or
// nullopt (also without MTP).
std::optional<std::string> deepseek_mtp_unexportable(const ResolvedModelConfig& m);
// The MTP layers an export writes: model.mtp_num_layers, or 0 when deepseek_mtp_unexportable.
int64_t deepseek_export_mtp_layers(const ResolvedModelConfig& m);

// The family keys of config.json (everything but vocab_size, token ids, dtype and "strata").
void deepseek_config_json(const ResolvedModelConfig& m, nlohmann::ordered_json& j);
// What the "strata" object adds: the MoE training options (hf_moe_format.h moe_strata_json),
// moe_router_enable_expert_bias, mtp_loss_scaling_factor.
void deepseek_strata_json(const ResolvedModelConfig& m, nlohmann::ordered_json& strata);
// The model section from config.json (either spelling: rope_scaling with "type", or transformers
// 5's rope_parameters). Anything Strata cannot compute as transformers does is an error naming
// the key and `file`.
void deepseek_config_from_json(const nlohmann::json& j, const std::string& file, ModelConfig& m);
// Restores what deepseek_strata_json recorded (`where` names it in errors).
void deepseek_strata_from_json(const nlohmann::json& s, const std::string& where, ModelConfig& m);
// What an export ignores or writes differently, one line each (MoE training-only options, an
// expert bias written as zeros, MTP layers left out).
std::vector<std::string> deepseek_export_notes(const ResolvedModelConfig& m);

// DeepSeek-V3's router (DeepseekV3TopkRouter; NemotronHTopkRouter is the same code) ranks the
// groups by the sum of each group's top-2 biased scores, Megatron's group_limited_topk by the sum of
// the top moe_router_topk // moe_router_group_topk: the same exactly when that quotient is 2 or the
// limit keeps every group. Why the finalized MoE config's groups differ (names the field and
// `router`, the transformers class), or "".
std::string router_groups_incompatibility(const ResolvedModelConfig& m, const char* router);
// n_group / topk_group (config.json, either family) into moe_router_num_groups /
// moe_router_group_topk (left null when every group is kept); refused where the ranks differ.
void read_router_groups(const nlohmann::json& j, const std::string& file, int64_t experts, int64_t k,
                        const char* router, ModelConfig& m);

}  // namespace strata::hf::detail
