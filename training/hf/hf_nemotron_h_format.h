// NemotronHForCausalLM (transformers' nemotron_h; NVIDIA's Nemotron-H and Nemotron-3 models): which
// Strata hybrid models it expresses and its config.json keys in both directions (used by
// training/hf/hf_families.cpp and hf_format.cpp; the tensors are training/hf/hf_nemotron_h_map.h).
//   model.hybrid_layer_pattern M / * / - / E ⇄ layers_block_type "linear_attention" / "full_attention" /
//       "mlp" / "moe" (the Hub's older configs: hybrid_override_pattern, the same letters, and the
//       legacy names "mamba" / "attention"); `|` is dropped (kept under "strata"), MTP depths (`/`)
//       are not exported
//   mamba_num_heads, mamba_head_dim, mamba_num_groups, mamba_state_dim, mamba_chunk_size
//       ⇄ mamba_num_heads, mamba_head_dim, n_groups, ssm_state_size, chunk_size (conv_kernel 4,
//       use_conv_bias true, mamba_hidden_act silu, time_step_limit (0, inf): Megatron's MambaMixer)
//   num_attention_heads, num_query_groups, kv_channels ⇄ num_attention_heads, num_key_value_heads,
//       head_dim (NemotronHConfig's default 128); position_embedding_type none (no RoPE)
//   ffn_hidden_size (the `-` layers), squared_relu ⇄ intermediate_size, mlp_hidden_act "relu2"
//   num_experts, moe_router_topk, moe_ffn_hidden_size, moe_shared_expert_intermediate_size,
//       moe_latent_size ⇄ n_routed_experts, num_experts_per_tok, moe_intermediate_size,
//       moe_shared_expert_intermediate_size, moe_latent_size (fc1/fc2_latent_proj)
//   sigmoid scores + expert bias ⇄ NemotronHTopkRouter (e_score_correction_bias), n_group / topk_group,
//       routed_scaling_factor, norm_topk_prob true for top-k > 1 (Megatron's renormalisation)
//   layernorm_epsilon ⇄ layer_norm_epsilon (1e-5 with Mamba layers: Megatron's gated norm fixes it),
//   untie_embeddings_and_output_weights ⇄ !tie_word_embeddings, fp32_residual_connection ⇄
//   residual_in_fp32 (which transformers' modeling ignores), init_method_std ⇄ initializer_range
// Semantics checked against transformers 5.25 modeling_nemotron_h.py: every block is x + mixer(
// RMSNorm(x)) (Megatron's fused pre-norms and the E layer's pre_mlp_layernorm), the gated group
// RMSNorm of the mixer normalises y·silu(z) in groups of d_inner / n_groups with eps
// layer_norm_epsilon (Megatron: 1e-5), the attention is plain causal softmax(q k^T / √head_dim)
// without positions or biases (attention_bias is ignored by the modeling code), the MLP and experts
// are down(relu(up x)²), the router is f32 sigmoid with DeepSeek-V3's group rule
// (hf_deepseek_format.h router_groups_incompatibility), the experts act in the latent space between
// fc1_latent_proj and fc2_latent_proj and the shared experts on the block input.
// Details and the refusals: docs/formats.md, "NemotronHForCausalLM".
// Reference: transformers models/nemotron_h/{configuration,modeling}_nemotron_h.py,
// conversion_mapping.py ("nemotron_h": backbone. → model., per-expert tensors merged);
// Megatron-LM megatron/core/ssm/mamba_mixer.py, megatron/core/transformer/moe/moe_layer.py
// (fc1_latent_proj / fc2_latent_proj); Megatron-Bridge models/nemotronh/nemotron_h_bridge.py (the
// Hub's names).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/config/model_config.h"

namespace strata::hf::detail {

// Why the finalized model config is not a NemotronHForCausalLM (names the field), or "".
std::string nemotron_h_incompatibility(const ResolvedModelConfig& m);

// The family keys of config.json (everything but vocab_size, token ids, dtype and "strata").
void nemotron_h_config_json(const ResolvedModelConfig& m, nlohmann::ordered_json& j);
// What the "strata" object adds: the pattern with its `|`, the MoE training options
// (hf_moe_format.h moe_strata_json), moe_router_enable_expert_bias.
void nemotron_h_strata_json(const ResolvedModelConfig& m, nlohmann::ordered_json& strata);
// The model section from config.json (transformers 5's spelling, or the Hub's older one:
// hybrid_override_pattern, mamba_n_groups / mamba_d_conv / … aliases, a bare Infinity). Anything
// Strata cannot compute as transformers does is an error naming the key and `file`.
void nemotron_h_config_from_json(const nlohmann::json& j, const std::string& file, ModelConfig& m);
// Restores what nemotron_h_strata_json recorded (`where` names it in errors).
void nemotron_h_strata_from_json(const nlohmann::json& s, const std::string& where, ModelConfig& m);
// What an export leaves out or writes differently, one line each (MoE training-only options, an
// expert bias written as zeros, MTP depths).
std::vector<std::string> nemotron_h_export_notes(const ResolvedModelConfig& m);

}  // namespace strata::hf::detail
