// Multi-latent attention's config fields (the `model` section's MLA fields, Megatron's names and
// CLI defaults) and their rules. The fields live in ModelConfig; add_mla_fields declares them in the
// config table; check_mla_config checks a model with MLA layers (its symbols `L` and `+`, the layer
// kinds' layout check calls it) before anything is allocated.
// Reference: megatron/core/transformer/transformer_config.py (MLATransformerConfig: q_lora_rank,
// kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim, rope_type), megatron/training/
// arguments.py (_add_mla_args: the CLI defaults; --rope-type: "MLA takes yarn by default"),
// megatron/training/argument_utils.py (rope_type only for MLA; MLA excludes group query attention).
#pragma once
#include <cstdint>

#include "core/config_table.h"

namespace strata {

struct ModelConfig;

// The RoPE variant MLA applies to its positional channels (Megatron MLATransformerConfig.rope_type).
enum class RopeType { Rope, Yarn };
inline constexpr config::EnumName<RopeType> kRopeTypeNames[] = {{RopeType::Rope, "rope"}, {RopeType::Yarn, "yarn"}};

void add_mla_fields(config::SectionFields<ModelConfig>& f);

// MLA's sizes from a model config (global, before tensor parallelism).
struct MlaDims {
  int64_t hidden = 0, heads = 0;
  int64_t q_lora_rank = 0;  // 0: queries projected directly from the hidden state (linear_q_proj)
  int64_t kv_lora_rank = 0, qk_head_dim = 0, qk_pos_emb_head_dim = 0, v_head_dim = 0;
  int64_t q_head_dim() const { return qk_head_dim + qk_pos_emb_head_dim; }  // queries' and keys' head dim
  int64_t kv_down_out() const { return kv_lora_rank + qk_pos_emb_head_dim; }  // the latent and the RoPE key
  int64_t kv_up_out() const { return heads * (qk_head_dim + v_head_dim); }
  int64_t q_out() const { return heads * q_head_dim(); }
  // Bytes per token of one layer's generation cache: the normalized latent and the rotated RoPE key.
  int64_t cache_bytes_per_token(int64_t element_bytes) const { return kv_down_out() * element_bytes; }
};
MlaDims mla_dims(const ModelConfig& m);

// The model has MLA layers: model.multi_latent_attention (GPT) or '+' in model.hybrid_layer_pattern.
bool has_mla_layers(const ModelConfig& m);

// The RoPE variant MLA uses: model.rope_type, yarn when unset (Megatron's MLA default).
RopeType mla_rope_type(const ModelConfig& m);

// Cross-field rules of the MLA fields (part of the model section's resolution): a ConfigError
// naming the field. rope_type without MLA must be rope (Megatron: common attention supports only
// rope); MLA excludes group_query_attention and rotary_interleaved (Megatron asserts both).
void check_mla_fields(const ModelConfig& m);

// What a model with MLA layers needs from the parallel layout: heads divisible by the tensor-parallel
// size (Megatron splits MLA's heads as it splits attention heads).
void check_mla_config(const ModelConfig& m, int64_t tensor_model_parallel_size);

}  // namespace strata
