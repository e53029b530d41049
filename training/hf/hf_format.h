// Hugging Face model formats for `strata export --format hf` / `strata import --hf`: the config.json
// mapping in both directions, pure functions over JSON (the families and tensor maps are the GPT
// model's, training/hf/hf_families.h; training/hf/hf_export.h does the file work).
// Reference: transformers models/{llama,qwen3,gpt2,mixtral,qwen3_moe,deepseek_v3,nemotron_h,gpt_oss}/ (configuration_*, modeling_*;
// Conv1D in pytorch_utils.py), Megatron-LM tools/checkpoint/{loader_llama_mistral,saver_megatron}.py.
// Import reads both the Hub's older spellings (top-level rope_theta / rope_scaling, torch_dtype,
// Qwen3-MoE's num_experts) and transformers 5's (rope_parameters, dtype, num_local_experts); export
// writes the spelling of transformers kTransformersVersion (modeling_rope_utils.py
// RotaryEmbeddingConfigMixin, configuration_utils.py).
// Details (families, tensor layouts, vocabulary padding, the "strata" object, MoE keys):
// docs/formats.md, "Hugging Face directories"; MoE keys: training/hf/hf_moe_format.h; DeepseekV3's
// keys: training/hf/hf_deepseek_format.h; NemotronH's: training/hf/hf_nemotron_h_format.h; gpt-oss's:
// training/hf/hf_gpt_oss_format.h.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "training/hf/hf_families.h"
#include "models/config/model_config.h"
#include "training/config/config.h"

namespace strata::hf {

// The transformers release whose config.json spelling export writes (and config.json's
// "transformers_version"); scripts/setup.sh installs it and the tests load exports with it.
inline constexpr const char* kTransformersVersion = "5.25.0";

// What config.json needs besides the model section.
struct ExportInfo {
  DType dtype = DType::F32;          // F32 | BF16 | F16 → config.json's dtype
  std::optional<int64_t> bos_id, eos_id;
  std::string tokenizer_type;        // recorded in the "strata" object
  nlohmann::json tokenizer_settings;  // TikTokenizer's data.tiktoken_* fields ("strata" "tokenizer"), else null
};
// config.json for a finalized model config (vocab_size: model.vocab_size, unpadded: Megatron's
// padding rows are dropped, as transformers' log-softmax runs over every row).
// make_vocab_size_divisible_by, seq_length, tokenizer and hidden_dropout ride along in a "strata"
// object (transformers keeps unknown config keys) that import uses when present.
nlohmann::ordered_json config_json(const ResolvedModelConfig& m, Family f, const ExportInfo& info);
// generation_config.json from the tokenizer ids and the inference section.
nlohmann::ordered_json generation_config_json(const InferenceConfig& inf, const ExportInfo& info);

// config.json → model section (not finalized) and the rest import needs. `file` names config.json
// in errors.
// Exports whose config.json vocab_size is the padded vocabulary (older ones) still import.
struct ImportedConfig {
  Family family = Family::Llama;
  ModelConfig model;
  std::optional<std::string> tokenizer_type;  // from the "strata" object
  nlohmann::json tokenizer_settings;          // its "tokenizer" object, or null
  std::optional<int64_t> eos_id;
  int64_t file_vocab = 0;  // config.json vocab_size: the embedding (and lm_head) rows in the file
  // DeepseekV3: config.json's num_nextn_predict_layers, the MTP layers the file may hold after the
  // decoder layers (model.mtp_num_layers starts at it; import drops it when the file holds none).
  // NemotronH: num_nextn_predict_layers (transformers does not run them; import leaves their mtp.* tensors out).
  int64_t file_mtp_layers = 0;
};
ImportedConfig model_config_from_json(const nlohmann::json& config, const std::string& file);

}  // namespace strata::hf
