// `strata import --hf DIR --save OUT [--force] [--config-override section.field=value ...]`: reads a Hugging
// Face LlamaForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel, MixtralForCausalLM, Qwen3MoeForCausalLM
// or DeepseekV3ForCausalLM directory (config.json +
// model.safetensors or sharded safetensors) and writes a weights-only Strata checkpoint
// (OUT/iter_0000000, tracker "0") that `strata generate --load OUT` and
// `strata train checkpoint.load=OUT checkpoint.finetune=true` read. An OUT that already holds a
// checkpoint is refused unless --force (its tracker would be rewritten). The logic is in
// training/hf/hf_export.h.
// Reference: Megatron-LM tools/checkpoint/convert.py (loader_llama_mistral.py, saver_megatron.py).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "apps/strata/commands.h"
#include "core/error.h"
#include "training/hf/hf_export.h"

namespace strata::app {

void register_import(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("import", "import a Hugging Face model directory as a Strata checkpoint");
  cmd->footer(
      "Reads config.json (architectures LlamaForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel,\n"
      "MixtralForCausalLM, Qwen3MoeForCausalLM or DeepseekV3ForCausalLM; transformers 5's spelling or\n"
      "the Hub's older one; NemotronH and DeepSeek-V2 are refused by name) and model.safetensors (or model.safetensors.index.json and its\n"
      "shards, which must lie inside DIR). Missing, extra or\n"
      "wrong-shaped tensors are errors naming the tensor and the file. All-bf16 tensors give\n"
      "training.precision=bf16, otherwise fp32 (f16 is widened).\n"
      "Tokenizer: vocab.json + merges.txt in DIR → GPT2BPETokenizer; else tokenizer.json\n"
      "(+ tokenizer_config.json) → HuggingFaceTokenizer; else tokenizer.model → Llama2Tokenizer\n"
      "(copied into OUT/iter_0000000/tokenizer/); else the one a strata export recorded; else\n"
      "NullTokenizer (use --prompt-ids). Everything is checked before anything is written: a\n"
      "failed import leaves nothing behind. model.seq_length defaults to\n"
      "max_position_embeddings; model.make_vocab_size_divisible_by to 1 (vocab_size as in config.json;\n"
      "a strata export's padding is restored, the padding rows copies of the last row as Megatron pads);\n"
      "data.mock_data=true and optimizer.lr=1e-5 so the saved config validates (override them).\n"
      "MoE: num_experts, moe_router_topk, moe_ffn_hidden_size, moe_router_pre_softmax\n"
      "(= !norm_topk_prob; Mixtral renormalises) and moe_layer_freq (Qwen3-MoE's mlp_only_layers /\n"
      "decoder_sparse_step) come from config.json; the aux_loss coefficient is router_aux_loss_coef\n"
      "when output_router_logits is true, else 0; a strata export's training-only MoE options return.\n"
      "DeepseekV3: multi-latent attention, YaRN (rope_type yarn), first_k_dense_replace dense layers,\n"
      "the sigmoid router with expert bias, groups and shared experts (docs/formats.md says what is\n"
      "refused); the MTP layers the file holds (model.layers.{num_hidden_layers + k}) become\n"
      "model.mtp_num_layers (--config-override model.mtp_num_layers=N keeps fewer; a note says so).\n"
      "The checkpoint is iteration 0 (iter_0000000) without optimizer state; train from it with\n"
      "checkpoint.load=OUT checkpoint.finetune=true and a model section matching OUT's manifest.\n"
      "An OUT that already holds a checkpoint (tracker or iter_*) is refused unless --force.\n"
      "Example: strata import --hf hf/gpt2 --save runs/gpt2 --config-override training.device=cpu\n"
      "         strata generate --load runs/gpt2 --prompt 'Hello' --max-new-tokens 20");
  struct Opts {
    std::string hf, save;
    std::vector<std::string> overrides;
    bool force = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--hf", o->hf, "Hugging Face model directory")->required();
  cmd->add_option("--save", o->save, "checkpoint directory to write (refused if it holds a checkpoint)")->required();
  cmd->add_flag("--force", o->force, "write into a --save directory that already holds a checkpoint");
  cmd->add_option("--config-override", o->overrides, "section.field=value applied to the imported config")
      ->expected(1, -1);
  add_one_process_runner(cmd, [o] {
    try {
      const hf::ImportResult r = hf::import_checkpoint(o->hf, o->save, o->overrides, o->force);
      std::printf("imported %s (%s) into %s\n", hf::architecture_name(r.family),
                  r.config.training->precision == Precision::Bf16 ? "bf16" : "fp32", r.checkpoint_dir.c_str());
      for (const std::string& n : r.notes) std::printf("note: %s\n", n.c_str());
    } catch (const std::filesystem::filesystem_error& e) {
      STRATA_THROW("strata import: ", e.what());
    }
    return 0;
  });
}

}  // namespace strata::app
