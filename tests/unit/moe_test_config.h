// The tiny MoE model config the MoE layer and observation tests share: 2 layers, hidden 8, 2 heads,
// vocabulary 24 (padded to 24), seq 6, no dropout, no biases, init std 0.3, 4 experts of ffn 6,
// top-2, aux_loss 0.1. Each test adds its own options.
#pragma once
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

}  // namespace strata::test
