// GptOssForCausalLM (transformers' gpt_oss; OpenAI's gpt-oss): which Strata GPT models it expresses
// and its config.json keys in both directions (used by training/hf/hf_families.cpp and
// hf_format.cpp; the tensors are training/hf/hf_gpt_oss_map.h).
//   every layer MoE: num_experts, moe_router_topk, moe_ffn_hidden_size ⇄ num_local_experts,
//       num_experts_per_tok, intermediate_size; the router a softmax over the top-k biased logits
//       (Megatron's post-softmax top-k with the router bias of add_bias_linear)
//   add_bias_linear ⇄ attention_bias true (q/k/v/o biases; the router and expert biases always)
//   quick_geglu + glu_linear_offset 1 + activation_func_clamp_value ⇄ the experts'
//       (up + 1) · gate · σ(1.702 · gate) with gate ≤ swiglu_limit and |up| ≤ swiglu_limit
//       (swiglu_alpha 1.702, Megatron's quick_gelu); no clamp ⇄ swiglu_limit Infinity
//   softmax_type learnable ⇄ self_attn.sinks (core_attention.softmax_offset)
//   window_size [W − 1, 0] on the layers window_attn_skip_freq leaves windowed ⇄ sliding_window W and
//       layer_types ("sliding_attention" / "full_attention"): transformers keeps keys kv > q − W
//       (masking_utils.py sliding_window_overlay), Megatron keys q − (W − 1) ≤ kv ≤ q
//   rotary_base and rope / yarn (truncate ⇄ yarn_correction_range_round_to_int) ⇄ rope_parameters
//       (training/hf/hf_rope.h; GptOssConfig's default_theta 150000)
//   layernorm_epsilon ⇄ rms_norm_eps; untie_embeddings_and_output_weights ⇄ !tie_word_embeddings
// Semantics checked against transformers 5.25 modeling_gpt_oss.py (GptOssAttention with
// eager_attention_forward's sinks, GptOssTopKRouter, GptOssExperts._apply_gate and its biases,
// rotate_half RoPE over the whole head). Details and the refusals: docs/formats.md, "GptOssForCausalLM".
// Reference: transformers models/gpt_oss/{configuration,modeling}_gpt_oss.py, masking_utils.py;
// Megatron-LM megatron/core/transformer/utils.py (is_layer_window_attention),
// megatron/core/fusions/fused_bias_geglu.py (quick_gelu, the clamp), megatron/post_training/model_builder.py
// (enable_gpt_oss); Megatron-Bridge models/gpt_oss/gpt_oss_bridge.py (window_size = sliding_window − 1).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/config/model_config.h"

namespace strata::hf::detail {

// Why the finalized model config is not a GptOssForCausalLM (names the field), or "".
std::string gpt_oss_incompatibility(const ResolvedModelConfig& m);

// The family keys of config.json (everything but vocab_size, token ids, dtype and "strata").
void gpt_oss_config_json(const ResolvedModelConfig& m, nlohmann::ordered_json& j);
// What the "strata" object adds: ffn_hidden_size (no dense layer holds it), window_attn_skip_freq
// as written, enable_gpt_oss and the MoE training options (hf_moe_format.h moe_strata_json).
void gpt_oss_strata_json(const ResolvedModelConfig& m, nlohmann::ordered_json& strata);
// The model section from config.json (transformers 5's spelling, or the Hub's older one:
// rope_scaling / rope_theta, no swiglu_alpha). Anything Strata cannot compute as transformers does
// (an MXFP4 quantization_config among them) is an error naming the key and `file`.
void gpt_oss_config_from_json(const nlohmann::json& j, const std::string& file, ModelConfig& m);
// Restores what gpt_oss_strata_json recorded (`where` names it in errors).
void gpt_oss_strata_from_json(const nlohmann::json& s, const std::string& where, ModelConfig& m);
// What an export leaves out or writes differently, one line each (MoE training-only options, MTP).
std::vector<std::string> gpt_oss_export_notes(const ResolvedModelConfig& m);

}  // namespace strata::hf::detail
