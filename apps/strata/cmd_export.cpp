// `strata export --load DIR --format hf --out OUT [--iteration N] [--force]`: writes a Hugging Face model
// directory (config.json, model.safetensors, generation_config.json; vocab.json + merges.txt for
// a GPT-2 BPE tokenizer) from a Strata checkpoint, as LlamaForCausalLM, Qwen3ForCausalLM,
// GPT2LMHeadModel, MixtralForCausalLM, Qwen3MoeForCausalLM or DeepseekV3ForCausalLM, whichever the
// model config matches. An
// OUT that exists and is not empty is refused unless --force (as import). The logic is in
// training/hf/hf_export.h.
// Reference: Megatron-LM tools/checkpoint/convert.py (saver for HF), transformers save_pretrained.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "apps/strata/commands.h"
#include "core/error.h"
#include "training/hf/hf_export.h"

namespace strata::app {

void register_export(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("export", "export a checkpoint as a Hugging Face model directory");
  cmd->footer(
      "Families (chosen from the checkpoint's model config):\n"
      "  LlamaForCausalLM  RMSNorm, swiglu, rope or yarn (rotary_interleaved=false, rotary_percent=1),\n"
      "                    add_bias_linear=false, GQA, tied or untied\n"
      "  Qwen3ForCausalLM  the same with qk_layernorm=true (q_norm / k_norm)\n"
      "  GPT2LMHeadModel   LayerNorm, GeLU (openai_gelu → gelu_new, else gelu), learned_absolute,\n"
      "                    add_bias_linear=true, no GQA, tied or untied\n"
      "  MixtralForCausalLM   Llama with every layer MoE (num_experts): softmax router,\n"
      "                    moe_router_pre_softmax=false (top-k weights renormalised), SwiGLU experts\n"
      "  Qwen3MoeForCausalLM  Qwen3 with MoE layers (dense ones where moe_layer_freq is 0):\n"
      "                    softmax router, norm_topk_prob = !moe_router_pre_softmax\n"
      "  MoE options neither expresses (sigmoid/sqrtsoftplus scores, expert bias, groups,\n"
      "  moe_router_topk_scaling_factor != 1, shared experts, moe_apply_probs_on_input) are errors;\n"
      "  capacity/dropping settings are training-only and ignored (a note says so).\n"
      "  DeepseekV3ForCausalLM  multi_latent_attention (q_lora_rank set or null, qk_layernorm,\n"
      "                    layernorm_epsilon 1e-6, rope_type rope or yarn), dense layers then MoE\n"
      "                    layers (first_k_dense_replace) with a sigmoid router, expert bias\n"
      "                    (e_score_correction_bias), shared experts, groups (n_group / topk_group when\n"
      "                    moe_router_topk // moe_router_group_topk is 2, transformers' top-2 group\n"
      "                    rank), routed_scaling_factor; MTP layers as DeepSeek stores them\n"
      "                    (model.layers.{num_layers + k}, num_nextn_predict_layers).\n"
      "A model matching none is an error naming the field. Tensors keep the checkpoint's dtype\n"
      "(bf16 → dtype bfloat16). The embedding and lm_head keep the real vocabulary only\n"
      "(config.json vocab_size = model.vocab_size, the tokenizer's): transformers' softmax runs over\n"
      "every row, so Megatron's padding rows are dropped and it scores as `generate --score`. The\n"
      "rest of the Strata config needed to import it back is kept under the \"strata\" key.\n"
      "config.json is in the spelling of transformers 5.25.0 (rope_parameters, dtype); load it\n"
      "with transformers >= 5. The checkpoint's tokenizer files (the copies it carries) go along;\n"
      "one that cannot be loaded is an error naming the file. --iteration must be >= 0.\n"
      "Files are written to a staging directory beside OUT and moved in when complete.\n"
      "An OUT that exists and is not empty is refused unless --force (the export's files then\n"
      "replace those of the same name; other files are left).\n"
      "Example: strata export --load runs/gpt --format hf --out hf/gpt\n"
      "         python3 -c \"import transformers as t; t.AutoModelForCausalLM.from_pretrained('hf/gpt')\"");
  struct Opts {
    std::string load, format, out;
    std::optional<int64_t> iteration;
    bool force = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--load", o->load, "checkpoint directory (holds latest_checkpointed_iteration.txt)")->required();
  cmd->add_option("--format", o->format, "output format: hf")->required();
  cmd->add_option("--out", o->out, "output directory (created; refused if it holds files, unless --force)")->required();
  cmd->add_option("--iteration", o->iteration, "iteration to export (default: the tracker's latest)");
  cmd->add_flag("--force", o->force, "write into an --out directory that already holds files");
  add_one_process_runner(cmd, [o] {
    STRATA_CHECK(o->format == "hf", "strata export: --format '", o->format, "' is not supported (hf)");
    try {
      const hf::ExportResult r = hf::export_checkpoint(o->load, o->out, o->iteration, o->force);
      std::printf("exported iteration %lld as %s (%s) to %s:", static_cast<long long>(r.iteration),
                  hf::architecture_name(r.family), dtype_name(r.dtype), o->out.c_str());
      for (const std::string& f : r.files) std::printf(" %s", f.c_str());
      std::printf("\n");
      for (const std::string& n : r.notes) std::printf("note: %s\n", n.c_str());
    } catch (const std::filesystem::filesystem_error& e) {
      STRATA_THROW("strata export: ", e.what());
    }
    return 0;
  });
}

}  // namespace strata::app
