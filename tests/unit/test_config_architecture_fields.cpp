// The architecture-defining model fields (models/config/model_config.h architecture_field_names): derived
// from the marks in the field table (core/config_table.h FieldSpec::architecture), they are exactly
// the set the hand-written list held before the marks, and every one names a model field.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "models/config/model_config.h"

using namespace strata;

namespace {
// The hand-written list architecture_field_names() returned before the field table carried the marks.
const std::set<std::string> kListBeforeMarks = {
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "group_query_attention",
    "num_query_groups", "kv_channels", "vocab_size", "padded_vocab_size", "max_position_embeddings",
    "position_embedding_type", "rotary_base", "rotary_percent", "use_rope_scaling", "rope_scaling_factor",
    "rotary_seq_len_interpolation_factor", "no_rope_freq",
    "rotary_interleaved", "normalization", "layernorm_epsilon", "apply_layernorm_1p", "qk_layernorm",
    "add_bias_linear", "add_qkv_bias", "swiglu", "openai_gelu", "untie_embeddings_and_output_weights",
    "apply_residual_connection_post_layernorm", "fp32_residual_connection", "num_experts",
    "moe_ffn_hidden_size", "moe_layer_freq", "moe_router_topk", "moe_router_pre_softmax",
    "moe_router_num_groups", "moe_router_group_topk", "moe_router_topk_scaling_factor",
    "moe_router_score_function", "moe_router_enable_expert_bias", "moe_shared_expert_intermediate_size",
    "moe_shared_expert_gate", "moe_apply_probs_on_input", "mamba_head_dim", "mamba_state_dim",
    "mamba_num_groups", "mamba_num_heads", "hybrid_layer_pattern", "mtp_num_layers", "mtp_use_repeated_layer",
    "enable_hyper_connections", "num_residual_streams", "mhc_sinkhorn_iterations", "mhc_norm_eps_inside_sqrt",
    "mhc_keep_mappings_in_fp32", "mhc_learned_output_contract",
    // added with position_embedding_type yarn (after the marks)
    "rotary_scaling_factor", "yarn_original_max_position_embeddings", "yarn_beta_fast", "yarn_beta_slow",
    "yarn_correction_range_round_to_int", "mscale", "mscale_all_dim",
    // added with multi-latent attention (after the marks)
    "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
    "rope_type",
    // added with gpt-oss's and Nemotron's activations (after the marks)
    "quick_geglu", "glu_linear_offset", "activation_func_clamp_value", "squared_relu",
    // added with latent MoE (after the marks)
    "moe_latent_size",
    // added with gpt-oss's sliding windows and attention sinks (after the marks)
    "window_size", "window_attn_skip_freq", "enable_gpt_oss", "softmax_type"};
}  // namespace

TEST_CASE("architecture fields are the marked model fields and the same set as the list before the marks",
          "[config]") {
  const std::vector<std::string>& names = architecture_field_names();
  const std::set<std::string> derived(names.begin(), names.end());
  CHECK(derived.size() == names.size());  // no field marked twice
  CHECK(derived == kListBeforeMarks);
  std::set<std::string> marked, all;
  config::SectionFields<ModelConfig> table = model_config_fields();
  for (const config::FieldSpec& f : table.fields()) {
    all.insert(f.name);
    if (f.architecture) marked.insert(f.name);
  }
  CHECK(marked == derived);
  for (const std::string& n : derived) CHECK(all.count(n) == 1);
}
