// The MoE model configs the MoE tests share. tiny_moe_model_config: the MoE layer and observation
// tests' model: 2 layers, hidden 8, 2 heads, vocabulary 24 (padded to 24), seq 6, no dropout, no
// biases, init std 0.3, 4 experts of ffn 6, top-2, aux_loss 0.1. moe_model_config: the router and
// routing tests' section (any expert count, top-k and hidden size). Each test adds its own options
// and resolves the section with ResolvedModelConfig, which checks its rules as for a config file.
#pragma once
#include <cstdint>

#include "models/config/model_config.h"

namespace strata::test {

inline ModelConfig tiny_moe_model_config() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 8;
  m.num_attention_heads = 2;
  m.vocab_size = 24;
  m.make_vocab_size_divisible_by = 8;
  m.seq_length = 6;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.add_bias_linear = false;
  m.init_method_std = 0.3;
  m.num_experts = 4;
  m.moe_ffn_hidden_size = 6;
  m.moe_router_topk = 2;
  m.moe_aux_loss_coeff = {0.1};
  return m;
}

// `experts` routed experts, top-`topk` routing, hidden size `hidden`; one attention head (so any
// hidden size resolves), the other fields ModelConfig's defaults.
inline ModelConfig moe_model_config(int64_t experts, int64_t topk, int64_t hidden = 6) {
  ModelConfig m;
  m.hidden_size = hidden;
  m.num_attention_heads = 1;
  m.num_experts = experts;
  m.moe_router_topk = topk;
  return m;
}

}  // namespace strata::test
