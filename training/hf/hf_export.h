// `strata export --format hf` and `strata import --hf`: a Strata checkpoint ⇄ a Hugging Face model
// directory (config.json + model.safetensors [+ generation_config.json, vocab.json, merges.txt])
// for LlamaForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel, MixtralForCausalLM, Qwen3MoeForCausalLM,
// DeepseekV3ForCausalLM (with its MTP layers as DeepSeek stores them), GptOssForCausalLM and, for
// hybrid models, NemotronHForCausalLM. Names, layouts and config keys: training/hf/hf_format.h, docs/formats.md
// (MoE: training/hf/hf_moe_format.h, training/hf/hf_moe_map.h; DeepseekV3: hf_deepseek_format.h,
// hf_deepseek_map.h).
// Reference: Megatron-LM tools/checkpoint/convert.py (loader_llama_mistral.py, saver_megatron.py),
// transformers PreTrainedModel.save_pretrained / from_pretrained file names.
// (The tokenizer: the files of tokenizer.json / tokenizer.model / vocab.json + merges.txt.)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "training/config/config.h"
#include "training/hf/hf_format.h"

namespace strata::hf {

struct ExportResult {
  Family family = Family::Llama;
  int64_t iteration = 0;
  DType dtype = DType::F32;
  std::vector<std::string> files;  // written, relative to the output directory
  std::vector<std::string> notes;  // settings the export ignores (MoE training-only options), one line each
};
// Reads the checkpoint's manifest config, checks that the model matches a family before allocating
// anything, loads the weights (checksums verified) and writes the HF tensors in the checkpoint's
// dtype (bf16 → dtype "bfloat16", f32 → "float32") with safetensors metadata {"format": "pt"}
// (what transformers expects), and the tokenizer's files: the copies the checkpoint carries
// (training/checkpointing/checkpoint_tokenizer.h), or for a checkpoint saved before it carried them
// the files its config names. A tokenizer that cannot be loaded is an error naming the file (an
// export without it could not be imported back).
// Exports the tracker's iteration (or `iteration`: >= 0; a missing one is an error naming the
// iterations that exist) under load_dir into out_dir. An out_dir that exists and is not empty is
// refused before anything is read unless `force` (then the export's files replace those of the same
// name; the others are left). The files are written to a staging directory beside out_dir and moved
// into it only once all are written: a failure leaves out_dir as it was.
ExportResult export_checkpoint(const std::string& load_dir, const std::string& out_dir,
                               std::optional<int64_t> iteration = std::nullopt, bool force = false);

struct ImportResult {
  Family family = Family::Llama;
  ResolvedConfig config;        // saved in the checkpoint manifest
  std::string checkpoint_dir;   // <save>/iter_0000000
  std::vector<std::string> notes;  // what the import left out or changed (DeepseekV3's MTP layers), one line each
};
// Reads config.json (either spelling: training/hf/hf_format.h) and model.safetensors (or the shards
// of model.safetensors.index.json, each inside hf_dir), builds the StrataConfig (bf16 tensors →
// training.precision=bf16, f32/f16 → fp32) and writes a weights-only checkpoint at iteration 0
// (<save>/iter_0000000/, tracker "0"; Megatron's converters write release/, but the numbered layout
// lets `strata generate --load` and finetuning read it like any checkpoint). Tokenizer: vocab.json +
// merges.txt → GPT2BPETokenizer; tokenizer.json → HuggingFaceTokenizer; tokenizer.model →
// Llama2Tokenizer (the save copies them into iter_0000000/tokenizer/); else the one a Strata export
// recorded; else NullTokenizer (prompts as ids). DeepseekV3: the MTP layers the file holds after the
// decoder layers (up to num_nextn_predict_layers) become model.mtp_num_layers (an override may ask
// for fewer; the rest are left out with a note). Everything is checked (tensors, tokenizer files,
// errors naming hf_dir's files) before anything is written; a failure leaves nothing behind.
// Imports the HF directory hf_dir into a Strata checkpoint under save_dir. `overrides`:
// "section.field=value" applied to the config built from config.json. A save_dir that already
// holds a checkpoint (a tracker file or an iter_* directory) is refused before anything is read
// or written unless `force` (then its tracker is rewritten to 0, the other iterations are left).
ImportResult import_checkpoint(const std::string& hf_dir, const std::string& save_dir,
                               const std::vector<std::string>& overrides = {}, bool force = false);

}  // namespace strata::hf
