// The Hugging Face families a Megatron-Core GPT model exports to and imports from, and the tensor
// name and layout maps between GPTModel's canonical parameter names and HF names (pure functions
// over host tensors; training/hf/hf_format.h maps config.json, training/hf/hf_export.h does the files).
// The family notes (QKV split per query group, SwiGLU halves, Conv1D transposes, real-vocabulary
// rows) are in docs/formats.md, "Hugging Face directories".
// The mixture-of-experts families (Mixtral, Qwen3-MoE) map the MoE layers' router and experts
// (training/hf/hf_moe_map.h; which Strata MoE options each can express: hf_families.cpp).
// DeepseekV3ForCausalLM (multi-latent attention, dense then MoE layers with shared experts and a
// sigmoid group-limited router, MTP layers) has its own config and tensor maps:
// training/hf/hf_deepseek_format.h, training/hf/hf_deepseek_map.h. NemotronHForCausalLM (the hybrid
// model: Mamba2, attention, MLP and MoE layers of model.hybrid_layer_pattern) likewise:
// training/hf/hf_nemotron_h_format.h, training/hf/hf_nemotron_h_map.h; GptOssForCausalLM (every layer
// MoE with biases, sinks, sliding windows, the clamped quick GeGLU): training/hf/hf_gpt_oss_format.h,
// training/hf/hf_gpt_oss_map.h.
// Reference: transformers models/llama, models/qwen3, models/gpt2, models/mixtral, models/qwen3_moe,
// models/deepseek_v3, models/nemotron_h, models/gpt_oss;
// Megatron-LM tools/checkpoint/{loader_llama_mistral,loader_mixtral_hf,saver_megatron}.py.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/config/model_config.h"

namespace strata::hf {

enum class Family { Llama, GPT2, Qwen3, Mixtral, Qwen3Moe, DeepseekV3, NemotronH, GptOss };
const char* to_string(Family f);           // model_type: "llama" | "gpt2" | … | "deepseek_v3" | "nemotron_h" | "gpt_oss"
const char* architecture_name(Family f);   // "LlamaForCausalLM" | … | "NemotronHForCausalLM" | "GptOssForCausalLM"
bool is_moe(Family f);                     // Mixtral, Qwen3Moe (DeepseekV3, NemotronH and GptOss map their own MoE keys)
bool has_qk_norm(Family f);                // Qwen3, Qwen3Moe (q_norm / k_norm)
bool is_llama_like(Family f);              // Llama, Qwen3, Mixtral, Qwen3Moe: q/k/v_proj attention, model.layers.N
bool is_mla(Family f);                     // DeepseekV3: multi-latent attention (model.multi_latent_attention)
bool is_hybrid(Family f);                  // NemotronH: a hybrid model (model.hybrid_layer_pattern)

// Why a finalized model config cannot be exported as `f` ("model.normalization=LayerNorm is not
// Llama's RMSNorm", "model.moe_router_score_function=sigmoid: …"), or nullopt when it can.
std::optional<std::string> incompatibility(const ResolvedModelConfig& m, Family f);
// The family a finalized model config matches; throws naming the field that prevents each.
Family family_for(const ResolvedModelConfig& m);

// Megatron canonical tensors (GPTModel::parameters() names and shapes) → HF tensors (same dtype).
std::map<std::string, Tensor> to_hf_tensors(const ResolvedModelConfig& m, Family f,
                                            const std::map<std::string, Tensor>& megatron);
// HF tensors → Megatron canonical tensors. Accepts names without the base-model prefix
// ("h.0.attn.c_attn.weight", "layers.0…"), ignores HF buffers (GPT-2 attn.bias / attn.masked_bias,
// Llama rotary_emb.inv_freq) and a tied lm_head.weight equal to the embeddings (NemotronH: names
// under "backbone." or "model.", experts one tensor each or fused). MoE families: the
// layer map (which layers are MoE) is the finalized m's. Missing, extra and
// wrong-shaped tensors are errors naming the tensor and `file`. `file_vocab`: the embedding rows
// in the file (config.json vocab_size); `padded_vocab`: the model's rows (Megatron's padding),
// reached by repeating the last row. DeepseekV3: `file_mtp_layers` (config.json's
// num_nextn_predict_layers) MTP layers may follow the decoder layers; those past m's
// model.mtp_num_layers are left out, with a line in *notes.
std::map<std::string, Tensor> from_hf_tensors(const ResolvedModelConfig& m, Family f, int64_t file_vocab, int64_t padded_vocab,
                                              const std::map<std::string, Tensor>& hf, const std::string& file,
                                              int64_t file_mtp_layers = 0, std::vector<std::string>* notes = nullptr);

}  // namespace strata::hf
