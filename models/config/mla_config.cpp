// Multi-latent attention's config fields and rules (models/config/mla_config.h).
// Reference: megatron/core/transformer/transformer_config.py (MLATransformerConfig),
// megatron/training/arguments.py (_add_mla_args), megatron/training/argument_utils.py.
#include "models/config/mla_config.h"

#include <string>

#include "models/config/model_config.h"

namespace strata {

using config::ConfigError;
using config::positive;

void add_mla_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  f.add("multi_latent_attention", &M::multi_latent_attention,
        "DeepSeek's multi-latent attention (MLA) in every GPT layer: queries (optionally through a low-rank "
        "latent) and one compressed key/value latent per token, with a decoupled RoPE key shared by the heads "
        "(docs/mla.md). Hybrid models place MLA layers with the '+' symbol instead.")
      .architecture_defining();
  f.add("q_lora_rank", &M::q_lora_rank,
        "MLA: rank of the queries' low-rank latent (linear_q_down_proj, then linear_q_up_proj). null: the "
        "queries are projected from the hidden state directly (linear_q_proj; DeepSeek-V2-Lite).")
      .check(positive())
      .architecture_defining();
  f.add("kv_lora_rank", &M::kv_lora_rank, "MLA: rank of the compressed key/value latent (what generation caches).")
      .check(positive())
      .architecture_defining();
  f.add("qk_head_dim", &M::qk_head_dim, "MLA: per-head query/key channels without position embedding.")
      .check(positive())
      .architecture_defining();
  f.add("qk_pos_emb_head_dim", &M::qk_pos_emb_head_dim,
        "MLA: per-head query/key channels that carry RoPE (the key's are shared by all heads).")
      .check(positive())
      .architecture_defining();
  f.add("v_head_dim", &M::v_head_dim, "MLA: per-head value channels.").check(positive()).architecture_defining();
  f.add_enum("rope_type", &M::rope_type, kRopeTypeNames,
             "MLA's RoPE: rope (plain, rotary_base) or yarn (rotary_scaling_factor, mscale, mscale_all_dim and "
             "the yarn_* fields). null: yarn with MLA (Megatron's default). Standard attention takes only rope "
             "here; it uses position_embedding_type.")
      .architecture_defining();
}

MlaDims mla_dims(const ModelConfig& m) {
  MlaDims d;
  d.hidden = m.hidden_size;
  d.heads = m.num_attention_heads;
  d.q_lora_rank = m.q_lora_rank.value_or(0);
  d.kv_lora_rank = m.kv_lora_rank;
  d.qk_head_dim = m.qk_head_dim;
  d.qk_pos_emb_head_dim = m.qk_pos_emb_head_dim;
  d.v_head_dim = m.v_head_dim;
  return d;
}

bool has_mla_layers(const ModelConfig& m) {
  return m.multi_latent_attention || (m.hybrid_layer_pattern && m.hybrid_layer_pattern->find('+') != std::string::npos);
}

RopeType mla_rope_type(const ModelConfig& m) { return m.rope_type.value_or(RopeType::Yarn); }

void check_mla_fields(const ModelConfig& m) {
  const bool hybrid_mla = m.hybrid_layer_pattern && m.hybrid_layer_pattern->find('+') != std::string::npos;
  const bool mla = has_mla_layers(m);
  if (!mla && m.rope_type == RopeType::Yarn)
    throw ConfigError("model.rope_type", "yarn applies to multi-latent attention only (Megatron: common attention "
                                         "supports only rope); use position_embedding_type yarn");
  if (!mla) return;
  if (m.group_query_attention)
    throw ConfigError("model.group_query_attention",
                      "is mutually exclusive with multi-latent attention (Megatron asserts it)");
  if (m.rotary_interleaved)
    throw ConfigError("model.rotary_interleaved", "does not work with multi-latent attention (Megatron raises)");
  if (m.qk_pos_emb_head_dim % 2 != 0)
    throw ConfigError("model.qk_pos_emb_head_dim", std::to_string(m.qk_pos_emb_head_dim) +
                                                       " must be even (RoPE rotates channel pairs)");
  if (!m.no_rope_freq.empty())
    throw ConfigError("model.no_rope_freq", "does not apply to multi-latent attention, which always rotates its "
                                            "qk_pos_emb_head_dim channels (Megatron's MLA takes no rotary_pos_emb)");
  if (m.multi_latent_attention && m.hybrid_layer_pattern)
    throw ConfigError("model.multi_latent_attention",
                      "is for GPT models; a hybrid model places MLA layers with '+' in model.hybrid_layer_pattern");
  if (hybrid_mla && m.hybrid_layer_pattern->find('*') != std::string::npos)
    throw ConfigError("model.hybrid_layer_pattern",
                      "mixes '*' (attention) with '+' (multi-latent attention); Megatron allows one of them per model");
}

void check_mla_config(const ModelConfig& m, int64_t tp) {
  if (m.num_attention_heads % tp != 0)
    throw ConfigError("model.num_attention_heads", std::to_string(m.num_attention_heads) +
                                                       " MLA heads are not divisible by "
                                                       "parallel.tensor_model_parallel_size (" +
                                                       std::to_string(tp) + ")");
}

}  // namespace strata
