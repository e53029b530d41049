// `strata export --format hf` and `strata import --hf`: a Strata checkpoint ⇄ a Hugging Face model
// directory (config.json + model.safetensors [+ generation_config.json, vocab.json, merges.txt])
// for LlamaForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel, MixtralForCausalLM and
// Qwen3MoeForCausalLM. Names, layouts and config keys: training/hf/hf_format.h, docs/formats.md
// (MoE: training/hf/hf_moe_format.h, models/gpt/hf_moe_map.h).
// Reference: Megatron-LM tools/checkpoint/convert.py (loader_llama_mistral.py, saver_megatron.py),
// transformers PreTrainedModel.save_pretrained / from_pretrained file names.
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
// dtype (bf16 → torch_dtype "bfloat16", f32 → "float32") with safetensors metadata {"format": "pt"}
// (what transformers expects); GPT-2 BPE tokenizer files are copied along.
// Exports the tracker's iteration (or `iteration`) under load_dir into out_dir. An out_dir that
// exists and is not empty is refused before anything is read unless `force` (then the export's
// files replace those of the same name; the others are left).
ExportResult export_checkpoint(const std::string& load_dir, const std::string& out_dir,
                               std::optional<int64_t> iteration = std::nullopt, bool force = false);

struct ImportResult {
  Family family = Family::Llama;
  StrataConfig config;          // validated; saved in the checkpoint manifest
  std::string checkpoint_dir;   // <save>/iter_0000000
};
// Reads config.json and model.safetensors (or the shards of model.safetensors.index.json), builds
// the StrataConfig (bf16 tensors → training.precision=bf16, f32/f16 → fp32) and writes a
// weights-only checkpoint at iteration 0 (<save>/iter_0000000/, tracker "0"; Megatron's converters
// write release/, but the numbered layout lets `strata generate --load` and finetuning read it like
// any checkpoint). Tokenizer: vocab.json + merges.txt → GPT2BPETokenizer (copied next to the
// checkpoint); else the one a Strata export recorded; else NullTokenizer (prompts as ids).
// Imports the HF directory hf_dir into a Strata checkpoint under save_dir. `overrides`:
// "section.field=value" applied to the config built from config.json. A save_dir that already
// holds a checkpoint (a tracker file or an iter_* directory) is refused before anything is read
// or written unless `force` (then its tracker is rewritten to 0, the other iterations are left).
ImportResult import_checkpoint(const std::string& hf_dir, const std::string& save_dir,
                               const std::vector<std::string>& overrides = {}, bool force = false);

}  // namespace strata::hf
