// DeepseekV3ForCausalLM's tensors ⇄ Megatron-Core canonical names (used by hf_tensor_map.cpp's
// to_hf_tensors / from_hf_tensors). Per layer N (decoder.layers.N. ⇄ model.layers.N.), one to one:
//   input_layernorm.weight                                   ⇄ input_layernorm.weight
//   self_attention.linear_q_down_proj.weight [q_lora, h]     ⇄ self_attn.q_a_proj.weight
//   self_attention.linear_q_up_proj.layer_norm_weight        ⇄ self_attn.q_a_layernorm.weight
//   self_attention.linear_q_up_proj.weight [n·(qk+pe), q_lora] ⇄ self_attn.q_b_proj.weight
//   self_attention.linear_q_proj.weight [n·(qk+pe), h]       ⇄ self_attn.q_proj.weight   (q_lora_rank null)
//   self_attention.linear_kv_down_proj.weight [kv_lora+pe, h] ⇄ self_attn.kv_a_proj_with_mqa.weight
//   self_attention.linear_kv_up_proj.layer_norm_weight       ⇄ self_attn.kv_a_layernorm.weight
//   self_attention.linear_kv_up_proj.weight [n·(qk+v), kv_lora] ⇄ self_attn.kv_b_proj.weight
//   self_attention.linear_proj.weight [h, n·v]               ⇄ self_attn.o_proj.weight
//   mlp.linear_fc1.layer_norm_weight                         ⇄ post_attention_layernorm.weight
//   dense: mlp.linear_fc1 [gate | up], mlp.linear_fc2        ⇄ mlp.gate_proj / up_proj / down_proj
//   MoE:   mlp.router.weight [E, h]                          ⇄ mlp.gate.weight
//          mlp.router.expert_bias [E] (f32)                  ⇄ mlp.gate.e_score_correction_bias (f32; zeros
//                                                              when model.moe_router_enable_expert_bias is off)
//          mlp.experts.linear_fc1.weight<e> / linear_fc2     ⇄ mlp.experts.e.gate_proj / up_proj / down_proj
//          mlp.shared_experts.linear_fc1 [gate | up] / fc2   ⇄ mlp.shared_experts.gate_proj / up_proj / down_proj
// The layouts agree: q_b_proj's per-head rows [nope | rope], kv_b_proj's [k_nope | v] and
// kv_a_proj_with_mqa's [kv_lora | rope] are Megatron's, and both rotate the RoPE channels as
// interleaved pairs (rope_interleave). MTP depth k (DeepSeek's layer L + k, L = num_hidden_layers):
//   mtp.layers.k.mtp_model_layer.<layer N's names>          ⇄ model.layers.{L+k}.<layer N's names>
//   mtp.layers.k.enorm / hnorm / eh_proj [h, 2h] / final_layernorm ⇄ enorm / hnorm / eh_proj / shared_head.norm
//   (the model's embedding and output head)                  ⇄ embed_tokens / shared_head.head (copies)
// Reference: transformers models/deepseek_v3/modeling_deepseek_v3.py, modeling_layers.py (MtpLayer:
// eh_proj(cat(enorm(embeds), hnorm(hidden)))); Megatron-LM multi_latent_attention.py,
// multi_token_prediction.py; DeepSeek-V3's checkpoint layout (layer 61 = the MTP layer).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/config/model_config.h"

namespace strata::hf::detail {

// Canonical tensors (with mtp.layers.* when deepseek_export_mtp_layers(m) > 0) → HF tensors.
// Vocabulary rows beyond model.vocab_size are dropped.
std::map<std::string, Tensor> deepseek_to_hf(const ResolvedModelConfig& m, const std::map<std::string, Tensor>& mg);
// HF tensors (names with the "model." prefix) → canonical tensors, the vocabulary padded to
// padded_vocab rows. The MTP layers past m's model.mtp_num_layers and before file_mtp_layers are
// left out with a line in *notes; missing, extra and wrong-shaped tensors are errors naming `file`.
std::map<std::string, Tensor> deepseek_from_hf(const ResolvedModelConfig& m, int64_t file_vocab, int64_t padded_vocab,
                                               std::map<std::string, Tensor> hf, const std::string& file,
                                               int64_t file_mtp_layers, std::vector<std::string>* notes);
// How many MTP layers of DeepSeek's layout the tensors hold: the k = 0, 1, … < declared whose
// model.layers.{num_layers + k}.eh_proj.weight is there (with or without "model.").
int64_t deepseek_mtp_layers_in(const std::map<std::string, Tensor>& hf, int64_t num_layers, int64_t declared);

}  // namespace strata::hf::detail
