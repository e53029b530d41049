// Hugging Face model formats for `strata export --format hf` / `strata import --hf`: the config.json
// mapping in both directions (the families and the tensor name and layout maps between Megatron-Core
// GPT names and HF names are the GPT model's: models/gpt/hf_families.h). Pure functions over host
// tensors and JSON (no files); training/hf_export.h does the file work.
//
// Families:
//   Llama  (LlamaForCausalLM, model_type "llama"): RMSNorm, SwiGLU, RoPE (rotate-half, full
//          rotary), no biases, GQA, tied or untied. Megatron's linear_qkv rows per query group
//          [q_1..q_{np/ng}, k, v] are split into q_proj / k_proj / v_proj; with non-interleaved
//          RoPE Megatron's q/k channel order is HF's rotate_half order, so no permutation (checked
//          numerically against tests/hf/hf_reference.py). linear_fc1 = [gate | up] halves.
//   Qwen3  (Qwen3ForCausalLM, model_type "qwen3"): Llama plus qk_layernorm — per-head RMSNorm of q
//          and k before RoPE (self_attn.q_norm / k_norm), Megatron's q_layernorm / k_layernorm.
//   GPT-2  (GPT2LMHeadModel, model_type "gpt2"): LayerNorm, GeLU (tanh: "gelu_new"; erf: "gelu"),
//          learned absolute positions, biases, MHA, tied (or untied with lm_head.weight). Conv1D
//          weights are stored [in, out] (transposed); c_attn is [q all heads | k | v].
//   Mixtral (MixtralForCausalLM, "mixtral"): Llama with every MLP a sparse MoE block
//          (block_sparse_moe: gate + experts w1/w3/w2); Megatron's softmax router with
//          moe_router_pre_softmax=false. Qwen3-MoE (Qwen3MoeForCausalLM, "qwen3_moe"): Qwen3 with
//          MoE layers (mlp.gate + mlp.experts.e.*) where moe_layer_freq says, dense ones elsewhere
//          (mlp_only_layers); norm_topk_prob = !moe_router_pre_softmax. Which MoE options export
//          refuses: models/gpt/hf_families.cpp; the MoE keys: training/hf_moe_format.h.
// apply_layernorm_1p checkpoints store gamma - 1; export writes gamma (adds 1).
// vocab_size in config.json and the rows of the embedding and lm_head are the real vocabulary
// (model.vocab_size, the tokenizer's size unless set larger): transformers' log-softmax runs over
// every row, so Megatron's padding rows are dropped on export and re-added on import (copies of
// the last row, as Megatron's converter pads). make_vocab_size_divisible_by, seq_length,
// tokenizer and hidden_dropout ride along in a "strata" object that import uses when present
// (transformers keeps unknown config keys). Exports written before this change (config.json
// vocab_size = the padded vocabulary) still import.
// Reference: transformers models/llama/{configuration,modeling}_llama.py, models/qwen3/modeling_qwen3.py,
// models/mixtral/, models/qwen3_moe/,
// models/gpt2/{configuration,modeling}_gpt2.py (Conv1D in pytorch_utils.py), Megatron-LM
// tools/checkpoint/{loader_llama_mistral,saver_megatron}.py (the same name maps).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "models/gpt/hf_families.h"
#include "models/model_config.h"
#include "training/config.h"

namespace strata::hf {

// What config.json needs besides the model section.
struct ExportInfo {
  DType dtype = DType::F32;          // F32 | BF16 → torch_dtype
  std::optional<int64_t> bos_id, eos_id;
  std::string tokenizer_type;        // recorded in the "strata" object
};
// config.json for a finalized model config (vocab_size: model.vocab_size, unpadded).
nlohmann::ordered_json config_json(const ModelConfig& m, Family f, const ExportInfo& info);
// generation_config.json from the tokenizer ids and the inference section.
nlohmann::ordered_json generation_config_json(const InferenceConfig& inf, const ExportInfo& info);

// config.json → model section (not finalized) and the rest import needs. `file` names config.json
// in errors.
struct ImportedConfig {
  Family family = Family::Llama;
  ModelConfig model;
  std::optional<std::string> tokenizer_type;  // from the "strata" object
  std::optional<int64_t> eos_id;
  int64_t file_vocab = 0;  // config.json vocab_size: the embedding (and lm_head) rows in the file
};
ImportedConfig model_config_from_json(const nlohmann::json& config, const std::string& file);

}  // namespace strata::hf
