// The submodule spec a transformer layer is assembled from (Megatron-Core's
// TransformerLayerSubmodules with IdentityOp defaults): an optional input norm + self-attention
// branch and an optional pre-MLP norm + MLP-slot branch, each added to the residual stream through
// hidden dropout. The full GPT layer has both; the hybrid stack's attention-only (`*`) and
// MLP-only (`-`) layers are specs of the same layer. The MLP slot takes a dense MLP now; the MoE
// layer is the next choice (MlpKind), so hybrid `E` layers reuse it unchanged.
// Reference: Megatron-Core transformer/transformer_layer.py (TransformerLayerSubmodules),
// models/gpt/gpt_layer_specs.py, models/hybrid/hybrid_layer_specs.py.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "models/config/attention_config.h"

namespace strata::layers {

// What fills a layer's MLP slot.
enum class MlpKind {
  Dense,  // linear_fc1 → activation → linear_fc2 (models/layers/mlp.h)
  MoE,    // router + grouped experts (+ shared expert) (models/layers/moe/moe_layer.h)
};

// What fills a layer's attention slot.
enum class AttentionKind {
  Standard,     // linear_qkv → RoPE → attention → linear_proj (models/layers/self_attention.h)
  MultiLatent,  // DeepSeek's MLA (models/layers/multi_latent_attention.h)
};

struct TransformerLayerSpec {
  bool self_attention = true;  // input_layernorm + self_attention (+ dropout, residual add)
  bool mlp = true;             // pre_mlp_layernorm + the MLP slot (+ dropout, residual add)
  MlpKind mlp_kind = MlpKind::Dense;
  // The pre-MLP norm as its own module (Megatron's MoETransformerLayer: pre_mlp_layernorm=TENorm,
  // names pre_mlp_layernorm.{weight,bias}) instead of fused into linear_fc1
  // (mlp.linear_fc1.layer_norm_{weight,bias}). The hybrid stack's `E` layers.
  bool separate_pre_mlp_norm = false;
  // One mHC site per branch (self_attention_hyper_connection, mlp_hyper_connection): a GPT layer
  // with model.enable_hyper_connections. False without mHC and for a layer that an mHC wrapper
  // holds (the wrapper is its site).
  bool branch_hyper_connections = false;
  // The attention applies RoPE when the model's positions are RoPE (false: a NoPE layer of
  // model.no_rope_freq, Megatron's Attention.forward dropping rotary_pos_emb).
  bool rope = true;
  AttentionKind attention_kind = AttentionKind::Standard;
  // The attention's sliding window (model.window_size on the layers window_attn_skip_freq picks); nullopt: full.
  std::optional<AttentionWindow> window;

  static TransformerLayerSpec full() { return {}; }
  static TransformerLayerSpec of_branches(bool attention, bool mlp_branch, MlpKind kind, bool separate_norm) {
    TransformerLayerSpec s;
    s.self_attention = attention;
    s.mlp = mlp_branch;
    s.mlp_kind = kind;
    s.separate_pre_mlp_norm = separate_norm;
    return s;
  }
  static TransformerLayerSpec attention_only() { return of_branches(true, false, MlpKind::Dense, false); }
  static TransformerLayerSpec mlp_only() { return of_branches(false, true, MlpKind::Dense, false); }
  static TransformerLayerSpec moe_only() { return of_branches(false, true, MlpKind::MoE, true); }
  // The layer kind's symbol of this spec: '*' attention only, '-' MLP only, 'E' MoE only, 'T' both
  // (Megatron's hybrid symbols); with MLA '+' attention only (Megatron's) and 'L' both (Strata's GPT layer).
  char symbol() const {
    const bool mla = attention_kind == AttentionKind::MultiLatent;
    if (self_attention) return mlp ? (mla ? 'L' : 'T') : (mla ? '+' : '*');
    return mlp_kind == MlpKind::MoE ? 'E' : '-';
  }
};

}  // namespace strata::layers
