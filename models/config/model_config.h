// ModelConfig: the `model` config section — the fields of Megatron-Core's TransformerConfig (plus
// the GPT-level vocabulary, sequence and position-embedding arguments), and the mixture-of-experts
// fields (num_experts, moe_*; rules in models/config/moe_config.cpp), the Mamba-2 mixer fields (mamba_*;
// rules in models/config/mamba_config.cpp) and the MLP activation fields (models/config/activation_config.h).
// Reference: megatron/core/transformer/transformer_config.py, megatron/training/arguments.py
// (_add_network_size_args, validate_args: ffn_hidden_size, kv_channels and query-group rules),
// megatron/training/tokenizer/tokenizer.py (_vocab_size_with_padding).
// Field names are Megatron's. The default of each field is its member initializer; std::optional
// members are Megatron's `None` defaults. Two types: ModelConfig is the section as written (YAML,
// flags, HF import); ResolvedModelConfig is one resolved once (the defaults derived, the hybrid
// pattern parsed, the MoE layer map, every rule of the section checked), which models/, the
// planner and the exports take.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config_table.h"
#include "core/resolved.h"
#include "models/config/activation_config.h"
#include "models/config/attention_config.h"
#include "models/config/hybrid_pattern.h"
#include "models/config/mamba_config.h"
#include "models/config/mla_config.h"
#include "models/config/mhc_config.h"
#include "models/config/moe_config.h"
#include "models/config/recompute_config.h"

namespace strata {

// Rope and Yarn are the rotary ones (ModelConfig::uses_rotary): Yarn is RoPE with YaRN's frequencies
// and concentration factor (Megatron's YarnRotaryEmbedding; the model.yarn_* fields).
enum class PositionEmbeddingType { LearnedAbsolute, Rope, Yarn, None };
inline constexpr config::EnumName<PositionEmbeddingType> kPositionEmbeddingTypeNames[] = {
    {PositionEmbeddingType::LearnedAbsolute, "learned_absolute"},
    {PositionEmbeddingType::Rope, "rope"},
    {PositionEmbeddingType::Yarn, "yarn"},
    {PositionEmbeddingType::None, "none"},
};

enum class Normalization { LayerNorm, RMSNorm };
inline constexpr config::EnumName<Normalization> kNormalizationNames[] = {
    {Normalization::LayerNorm, "LayerNorm"},
    {Normalization::RMSNorm, "RMSNorm"},
};

const char* to_string(PositionEmbeddingType t);
const char* to_string(Normalization n);

struct ModelConfig {
  // ---- size ----
  int64_t num_layers = 4;
  int64_t hidden_size = 256;
  std::optional<int64_t> ffn_hidden_size;  // null → 4·hidden, or int(4·hidden·2/3 / 64)·64 with swiglu
  int64_t num_attention_heads = 4;
  bool group_query_attention = false;
  std::optional<int64_t> num_query_groups;  // null → num_attention_heads
  std::optional<int64_t> kv_channels;       // null → hidden_size / num_attention_heads
  std::optional<int64_t> vocab_size;        // null → from the tokenizer (resolved when it is built)
  int64_t make_vocab_size_divisible_by = 128;
  // Megatron's --padded-vocab-size: the word-embedding / output rows as given (a multiple of
  // tensor_model_parallel_size, at least vocab_size); null → padded_vocab_size() below.
  std::optional<int64_t> padded_vocab_size;
  int64_t seq_length = 128;
  std::optional<int64_t> max_position_embeddings;  // null → seq_length

  // ---- positions ----
  PositionEmbeddingType position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
  int64_t rotary_base = 10000;
  double rotary_percent = 1.0;
  // Llama 3.x's RoPE frequency scaling (Megatron --use-rope-scaling / --rope-scaling-factor).
  bool use_rope_scaling = false;
  double rope_scaling_factor = 8.0;
  // Megatron --rotary-seq-len-interpolation-factor: RoPE positions divided by it. null: none.
  std::optional<int64_t> rotary_seq_len_interpolation_factor;
  bool rotary_interleaved = false;
  // Megatron --no-rope-freq: which layers skip RoPE (an int N, a 0/1 list, or a pattern string;
  // models/config/layer_pattern.h). Empty: every layer applies it.
  std::vector<std::string> no_rope_freq;
  // YaRN (position_embedding_type yarn; models/layers/rotary_config.h): Megatron's
  // --rotary-scaling-factor, --yarn-*, --mscale, --mscale-all-dim (argument_utils.py
  // _apply_yarn_config_from_args), with YarnRotaryEmbedding's defaults.
  double rotary_scaling_factor = 1.0;
  int64_t yarn_original_max_position_embeddings = 4096;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  bool yarn_correction_range_round_to_int = true;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;

  // ---- multi-latent attention (models/config/mla_config.h; Megatron's MLATransformerConfig, CLI defaults) ----
  bool multi_latent_attention = false;
  std::optional<int64_t> q_lora_rank;  // null → queries projected directly (linear_q_proj)
  int64_t kv_lora_rank = 32;
  int64_t qk_head_dim = 128;
  int64_t qk_pos_emb_head_dim = 64;
  int64_t v_head_dim = 128;
  std::optional<RopeType> rope_type;  // null → yarn for MLA

  // ---- attention window and softmax (models/config/attention_config.h; gpt-oss) ----
  std::vector<int64_t> window_size;                // [left, right]; empty: full causal attention
  std::vector<std::string> window_attn_skip_freq;  // an int N, a 0/1 list or a pattern; empty: every layer
  SoftmaxType softmax_type = SoftmaxType::Vanilla;
  // Megatron's --enable-gpt-oss (post_training/arguments.py): GPT-OSS's YaRN, applied at resolution
  // (apply_gpt_oss_positions, models/config/attention_config.h).
  bool enable_gpt_oss = false;

  // ---- normalization ----
  Normalization normalization = Normalization::LayerNorm;
  double layernorm_epsilon = 1e-5;
  bool apply_layernorm_1p = false;
  bool qk_layernorm = false;

  // ---- linear layers and activation ----
  bool add_bias_linear = true;
  bool add_qkv_bias = false;
  bool swiglu = false;
  bool openai_gelu = false;
  // gpt-oss's and Nemotron's activations (models/config/activation_config.h; mlp_activation()).
  bool quick_geglu = false;
  double glu_linear_offset = 0.0;
  std::optional<double> activation_func_clamp_value;  // null → no clamp
  bool squared_relu = false;
  bool use_fused_weighted_squared_relu = false;
  bool untie_embeddings_and_output_weights = false;

  // ---- regularization and init ----
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  double init_method_std = 0.02;

  // ---- numerics and layout ----
  bool apply_residual_connection_post_layernorm = false;
  bool attention_softmax_in_fp32 = true;
  bool fp32_residual_connection = false;

  // ---- mixture of experts (models/config/moe_config.h; Megatron's names, defaults and rules) ----
  std::optional<int64_t> num_experts;               // Megatron --num-experts; null → a dense model
  std::optional<int64_t> moe_ffn_hidden_size;       // null → ffn_hidden_size
  std::vector<std::string> moe_layer_freq = {"1"};  // an int N, a 0/1 list, or "([0]*1+[1]*3)"
  int64_t moe_router_topk = 2;
  MoeScoreFunction moe_router_score_function = MoeScoreFunction::Softmax;
  bool moe_router_pre_softmax = false;
  std::optional<int64_t> moe_router_num_groups;
  std::optional<int64_t> moe_router_group_topk;
  std::optional<double> moe_router_topk_scaling_factor;
  std::optional<MoeRouterDtype> moe_router_dtype;
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  std::vector<std::string> moe_router_load_balancing_type = {"aux_loss"};
  std::vector<double> moe_aux_loss_coeff = {0.0};
  std::optional<double> moe_z_loss_coeff;
  std::optional<double> moe_input_jitter_eps;
  std::optional<double> moe_expert_capacity_factor;  // null → dropless
  MoeTokenDropPolicy moe_token_drop_policy = MoeTokenDropPolicy::Probs;
  bool moe_pad_expert_input_to_capacity = false;
  bool moe_router_force_load_balancing = false;
  std::optional<int64_t> moe_shared_expert_intermediate_size;  // null → no shared expert
  bool moe_shared_expert_gate = false;
  bool moe_apply_probs_on_input = false;
  std::optional<int64_t> moe_latent_size;  // null → no latent projections (Nemotron-3 latent MoE)
  MoeTokenDispatcherType moe_token_dispatcher_type = MoeTokenDispatcherType::AllGather;
  bool moe_grouped_gemm = false;
  bool moe_per_layer_logging = false;

  // ---- Mamba-2 mixer (hybrid models' M layers; models/config/mamba_config.h) ----
  int64_t mamba_head_dim = 64;
  int64_t mamba_state_dim = 128;
  int64_t mamba_num_groups = 8;
  std::optional<int64_t> mamba_num_heads;  // null → 2·hidden_size / mamba_head_dim
  int64_t mamba_chunk_size = 128;
  // Multi-token prediction (models/config/mtp_config.cpp; docs/mtp.md).
  std::optional<int64_t> mtp_num_layers;  // null → no MTP heads
  double mtp_loss_scaling_factor = 0.1;
  bool mtp_use_repeated_layer = false;
  bool mtp_detach_heads = false;
  // ---- mHC hyper-connections (models/config/mhc_config.h; docs/mhc.md) ----
  bool enable_hyper_connections = false;
  int64_t num_residual_streams = 4;
  int64_t mhc_sinkhorn_iterations = 20;
  double mhc_init_gating_factor = 0.01;
  bool use_fused_mhc = false;
  std::optional<int64_t> mhc_recompute_layer_num;  // null → the whole local block
  bool mhc_norm_eps_inside_sqrt = false;
  bool mhc_keep_mappings_in_fp32 = false;
  bool mhc_learned_output_contract = true;
  // ---- activation recompute (models/config/recompute_config.h) ----
  std::optional<RecomputeGranularity> recompute_granularity;  // null → keep every activation
  std::optional<RecomputeMethod> recompute_method;            // full only
  std::optional<int64_t> recompute_num_layers;                // full only
  std::vector<std::string> recompute_modules = {"core_attn"};  // selective only (Megatron's default)
  bool distribute_saved_activations = false;
  bool moe_layer_recompute = false;  // deprecated: selective + moe

  // ---- hybrid models (models/config/hybrid_pattern.h; Megatron's --hybrid-layer-pattern) ----
  std::optional<std::string> hybrid_layer_pattern;     // null → a GPT model; set: num_layers from it
  std::optional<std::string> hybrid_override_pattern;  // deprecated alias of hybrid_layer_pattern
  bool is_hybrid_model = false;  // Megatron's TransformerConfig.is_hybrid_model: hybrid init (set by a pattern too)

  // Extension points (declare the member here, bind it in model_config_fields(), check it in
  // ResolvedModelConfig's resolution): mHC (mhc_*), MTP (mtp_num_layers, mtp_loss_scaling_factor),
  // recompute: see the recompute members above.

  // What the fields alone say (no resolution needed).
  bool is_hybrid() const { return hybrid_layer_pattern.has_value() || hybrid_override_pattern.has_value(); }
  // Megatron's TransformerConfig.is_hybrid_model: a hybrid pattern, or --is-hybrid-model on its own.
  bool hybrid_init() const { return is_hybrid() || is_hybrid_model; }
  bool is_moe() const { return num_experts.has_value(); }
  // Rotary positions in the attention: position_embedding_type rope or yarn.
  bool uses_rotary() const {
    return position_embedding_type == PositionEmbeddingType::Rope || position_embedding_type == PositionEmbeddingType::Yarn;
  }
  int64_t mtp_depths() const { return mtp_num_layers.value_or(0); }  // MTP depths D (0 without MTP)
  // The std of the output projections (linear_proj, linear_fc2, the experts' fc2, Mamba out_proj):
  // init_method_std / sqrt(multiplier · num_layers), multiplier 2.0 for GPT and 1.0 for hybrid
  // models (Megatron TransformerConfig: is_hybrid_model; hybrid_init()).
  double output_layer_init_std() const;
  // Rows of the word embeddings and output layer at this tensor-parallel size: padded_vocab_size
  // when set, else vocab_size padded as Megatron's _vocab_size_with_padding. vocab_size must be set.
  int64_t padded_vocab(int64_t tensor_model_parallel_size) const;
  // The active load-balancing losses (type not `none`, coefficient > 0), in the configured order.
  std::vector<MoeLoadBalancingLoss> moe_load_balancing_losses() const;
  // The coefficient of the load-balancing loss `type` (aux_loss, seq_aux_loss, global_aux_loss)
  // when it is active, else 0 (Megatron's get_aux_loss_coeff).
  double moe_load_balancing_coeff(const std::string& type) const;

  bool operator==(const ModelConfig&) const = default;
};

// A model section resolved once, at construction from the section as written: Megatron's derived
// defaults filled in (ffn_hidden_size, num_query_groups, kv_channels, max_position_embeddings,
// moe_ffn_hidden_size; the hybrid alias resolved and num_layers taken from the pattern), the hybrid
// pattern parsed, the MoE layer map, and every rule that needs only the model section checked: the
// field table's per-field rules and the cross-field ones (config::ConfigError naming the field).
// Rules that involve the parallel layout (heads % tp, experts % ep …) are StrataConfig::validate's.
// The fields are read through `->`
// (`cfg->hidden_size`, core/resolved.h) and cannot be written: a module that needs another value
// takes it as an argument, and a changed section is resolved anew (`ResolvedModelConfig(edited)`).
class ResolvedModelConfig : public Resolved<ModelConfig> {
 public:
  explicit ResolvedModelConfig(const ModelConfig& raw);

  int64_t ffn() const { return *fields().ffn_hidden_size; }
  int64_t query_groups() const { return *fields().num_query_groups; }
  int64_t head_dim() const { return *fields().kv_channels; }
  int64_t max_positions() const { return *fields().max_position_embeddings; }
  // The experts' FFN size: moe_ffn_hidden_size, which defaults to ffn_hidden_size (0: dense).
  int64_t moe_ffn() const { return fields().moe_ffn_hidden_size.value_or(0); }
  // The activation of every MLP of the model (models/config/activation_config.h).
  const MlpActivation& activation() const { return activation_; }
  // The parsed hybrid_layer_pattern (a GPT model's is empty).
  const hybrid::HybridPattern& hybrid_pattern() const { return pattern_; }
  // Whether layer `layer` (0-based, over the whole model) has an MoE MLP: false for a dense model.
  bool is_moe_layer(int64_t layer) const;
  // 1 where a layer has an MoE MLP (moe_layer_freq, or a hybrid pattern's E symbols); empty: dense.
  const std::vector<int64_t>& moe_layer_map() const { return moe_layer_map_; }
  // Whether the attention of the layer numbered `number` (0-based) in its stack applies RoPE:
  // position_embedding_type rope or yarn and model.no_rope_freq not marking it. Decoder layers are numbered
  // over the whole model; MTP inner layers by their own numbering, as Megatron's (layer_kind.cpp).
  bool applies_rope(int64_t number) const;
  // The sliding window of the attention of the layer numbered `number` (0-based, numbered as
  // applies_rope's), or nullopt for full attention (model.window_size, model.window_attn_skip_freq).
  std::optional<AttentionWindow> attention_window(int64_t number) const;

 private:
  struct Resolution;
  static Resolution resolve(const ModelConfig& raw);
  explicit ResolvedModelConfig(Resolution r);
  const ModelConfig& fields() const { return **this; }

  hybrid::HybridPattern pattern_;
  MlpActivation activation_;
  std::vector<int64_t> moe_layer_map_;
  std::vector<int64_t> no_rope_layers_;  // 1 where a layer skips RoPE (model.no_rope_freq); empty: none
  std::vector<int64_t> window_layers_;   // 1 where a layer uses model.window_size; empty: no window
};

// The `model` section's fields (names, docs, validators) for the config table.
config::SectionFields<ModelConfig> model_config_fields();

// Megatron's default FFN size: 4·hidden, or int(4·hidden·2/3 / 64)·64 for SwiGLU (arguments.py).
int64_t default_ffn_hidden_size(int64_t hidden_size, bool swiglu);

// Megatron's _vocab_size_with_padding: round vocab_size up to a multiple of
// make_vocab_size_divisible_by × tensor_model_parallel_size.
int64_t padded_vocab_size(int64_t vocab_size, int64_t make_vocab_size_divisible_by, int64_t tensor_model_parallel_size);

// Part of the resolution: every tensor's element count and the model's total within 2^48, each product
// computed overflow-safe; a ConfigError naming the field that makes one too large.
void check_model_sizes(const ModelConfig& m);

// The model.* fields that define the network a checkpoint's tensors belong to: its parameters'
// names and shapes, or the function they compute (norms, activations, positions, routing). A
// checkpoint resumed under a config that differs in any of them is refused (training/
// checkpoint_architecture.h). Dropouts, init, recompute, kernels choices and loss coefficients
// are not among them: a resumed run may change those. Derived from the field table: the fields
// declared with .architecture_defining() (core/config_table.h), in table order.
const std::vector<std::string>& architecture_field_names();

}  // namespace strata
