// GptOssForCausalLM's tensors ⇄ Megatron-Core GPTModel canonical names (used by hf_tensor_map.cpp's
// to_hf_tensors / from_hf_tensors). Per layer N (decoder.layers.N. ⇄ model.layers.N.):
//   self_attention.linear_qkv.layer_norm_weight          ⇄ input_layernorm.weight
//   self_attention.linear_qkv.weight / .bias (rows per query group [q…, k, v])
//                                                        ⇄ self_attn.q_proj / k_proj / v_proj .weight / .bias
//   self_attention.linear_proj.weight / .bias            ⇄ self_attn.o_proj.weight / .bias
//   self_attention.core_attention.softmax_offset [heads] ⇄ self_attn.sinks
//   mlp.linear_fc1.layer_norm_weight                     ⇄ post_attention_layernorm.weight
//   mlp.router.weight [E, h] / .bias [E]                 ⇄ mlp.router.weight / .bias
//   mlp.experts.linear_fc1.weight<e> [2F, h] = [gate; up] ⇄ mlp.experts.gate_up_proj[e] [h, 2F], its columns
//                                                          interleaved: 2r = gate row r, 2r + 1 = up row r
//   mlp.experts.linear_fc1.bias<e> [2F] = [gate; up]     ⇄ mlp.experts.gate_up_proj_bias[e] [2F], interleaved
//   mlp.experts.linear_fc2.weight<e> [h, F]              ⇄ mlp.experts.down_proj[e] [F, h] (transposed: x @ W)
//   mlp.experts.linear_fc2.bias<e> [h]                   ⇄ mlp.experts.down_proj_bias[e]
//   embedding.word_embeddings, decoder.final_layernorm, output_layer ⇄ model.embed_tokens, model.norm,
//   lm_head (absent when tied)
// The experts are fused over E as transformers stores them (no conversion on load), which is also
// the layout of the Hub's bf16 checkpoints.
// Reference: transformers models/gpt_oss/modeling_gpt_oss.py (GptOssExperts: gate_up[..., ::2] /
// [..., 1::2], x @ gate_up_proj[e] + bias; GptOssAttention.sinks; GptOssTopKRouter);
// Megatron-Bridge models/gpt_oss/gpt_oss_bridge.py (GPTOSSMLPGateUpProjMapping's interleave,
// GPTOSSMLPDownProjMapping's transpose).
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"
#include "models/config/model_config.h"

namespace strata::hf::detail {

// Canonical tensors → HF tensors (vocabulary rows beyond model.vocab_size dropped).
std::map<std::string, Tensor> gpt_oss_to_hf(const ResolvedModelConfig& m, const std::map<std::string, Tensor>& mg);
// HF tensors (names with the "model." prefix) → canonical tensors, the vocabulary padded to
// padded_vocab rows; missing, extra and wrong-shaped tensors are errors naming `file`.
std::map<std::string, Tensor> gpt_oss_from_hf(const ResolvedModelConfig& m, int64_t file_vocab, int64_t padded_vocab,
                                              std::map<std::string, Tensor> hf, const std::string& file);

}  // namespace strata::hf::detail
