// The Megatron-LM flags of StrataConfig that do not map onto a field by name (core/megatron_flags.h
// describes the rule every other field follows: --field-name, bool switches with --no-/--disable-).
// Registered with the config table in training/config/config.cpp; docs/config.md lists them (generated).
// Reference: megatron/training/arguments.py and the argparse_meta names of megatron/core's
// TransformerConfig / ModelParallelConfig and megatron/training/config/*.py.
#include "training/config/config.h"
#include "training/config/megatron_flag_families.h"

namespace strata {

using config::FlagArity;
using config::no_effect_flag;
using config::unsupported_flag;

namespace {
// Megatron's run-level flags that are next in line for a field of their own: for now refused by
// capability, or accepted where Strata does exactly what they select.
std::vector<config::MegatronFlagRule> run_rules_without_field() {
  using megatron_flags::refused;
  using megatron_flags::without_effect;
  std::vector<config::MegatronFlagRule> r;
  megatron_flags::append(
      r, without_effect("seeding each data-parallel rank differently (seed + 10 x dp rank), after which Megatron "
                        "broadcasts the weights from data-parallel rank 0, so every replica starts from the weights "
                        "the default seed gives; only the RNG streams differ per replica, and Strata's dropout masks "
                        "are keyed by the global sample index, different on every replica already and the same "
                        "under any layout",
                        {"--data-parallel-random-init"}));
  megatron_flags::append(r, without_effect("the number of gradient buckets (a schedule of the reductions: "
                                           "Strata's reductions give the same numbers for any bucketing; the size "
                                           "is --ddp-bucket-size)",
                                           {"--ddp-num-buckets"}));
  return r;
}
}  // namespace

std::vector<config::MegatronFlagRule> megatron_flag_rules() {
  using A = FlagArity;
  std::vector<config::MegatronFlagRule> rules = {
      // Other names for a field.
      config::rename_flag("--norm-epsilon", "layernorm_epsilon"),
      config::rename_flag("--decoder-first-pipeline-num-layers", "num_layers_in_first_pipeline_stage"),
      config::rename_flag("--decoder-last-pipeline-num-layers", "num_layers_in_last_pipeline_stage"),
      config::rename_flag("--deterministic-mode", "deterministic"),
      config::rename_flag("--persistent-save-interval", "save_interval"),
      config::rename_flag("--mhc-num-residual-streams", "num_residual_streams"),  // Megatron main's mHC names
      config::rename_flag("--num-virtual-stages-per-pipeline-rank", "virtual_pipeline_model_parallel_size"),
      // Megatron's spellings with an underscore (--*-opt-param-scheduler map by name).
      config::rename_flag("--override-opt_param-scheduler", "override_opt_param_scheduler"),
      config::rename_flag("--use-checkpoint-opt_param-scheduler", "use_checkpoint_opt_param_scheduler"),
      // Switches that set a field to a value.
      config::constant_flag("--bf16", "precision", "bf16"),
      config::constant_flag("--fp16", "precision", "fp16"),
      config::constant_flag("--disable-bias-linear", "add_bias_linear", "false"),
      config::constant_flag("--use-rotary-position-embeddings", "position_embedding_type", "rope"),
      config::constant_flag("--recompute-activations", "recompute_granularity", "selective"),
      config::constant_flag("--enable-mhc-connections", "enable_hyper_connections", "true"),
      // Megatron implementation choices: the numbers are the same in Strata.
      no_effect_flag("--use-mcore-models", A::Switch, "the Megatron-Core model classes"),
      no_effect_flag("--use-legacy-models", A::Switch, "Megatron's legacy model classes"),
      no_effect_flag("--transformer-impl", A::One, "Megatron's layer implementation (local or Transformer Engine)"),
      no_effect_flag("--attention-backend", A::One, "Megatron's attention kernel"),
      no_effect_flag("--use-flash-attn", A::Switch, "FlashAttention kernels"),
      no_effect_flag("--num-workers", A::One, "data-loader worker processes"),
      no_effect_flag("--distributed-backend", A::One, "torch.distributed's backend"),
      no_effect_flag("--local-rank", A::One, "the launcher's local rank (Strata reads the MPI/Slurm environment)"),
      no_effect_flag("--no-gradient-accumulation-fusion", A::Switch, "unfused weight-gradient accumulation"),
      no_effect_flag("--no-masked-softmax-fusion", A::Switch, "the unfused softmax"),
      no_effect_flag("--no-bias-gelu-fusion", A::Switch, "the unfused bias + GeLU"),
      no_effect_flag("--no-bias-swiglu-fusion", A::Switch, "the unfused bias + SwiGLU"),
      no_effect_flag("--no-bias-dropout-fusion", A::Switch, "the unfused bias + dropout + add"),
      no_effect_flag("--no-rope-fusion", A::Switch, "the unfused RoPE"),
      no_effect_flag("--no-persist-layer-norm", A::Switch, "the non-persistent LayerNorm kernel"),
      no_effect_flag("--cross-entropy-loss-fusion", A::Switch, "the fused cross-entropy kernel"),
      no_effect_flag("--no-async-tensor-model-parallel-allreduce", A::Switch, "blocking TP all-reduces"),
      no_effect_flag("--overlap-param-gather", A::Switch, "overlapping the distributed optimizer's all-gather"),
      no_effect_flag("--tp-comm-overlap", A::Switch, "Transformer Engine's TP communication overlap"),
      no_effect_flag("--use-cpu-initialization", A::Switch, "initialising weights on the CPU"),
      no_effect_flag("--no-create-attention-mask-in-dataloader", A::Switch, "the causal mask built in the kernel"),
      no_effect_flag("--no-mmap-bin-files", A::Switch, "reading .bin files without mmap"),
      no_effect_flag("--data-cache-path", A::One, "where Megatron caches its sample indices"),
      no_effect_flag("--ckpt-fully-parallel-load", A::Switch, "Megatron's parallel checkpoint loading"),
      no_effect_flag("--no-ckpt-fully-parallel-save", A::Switch, "Megatron's checkpoint saving strategy"),
      no_effect_flag("--exit-signal-handler", A::Switch, "saving and exiting on SIGTERM (Strata always does)"),
      no_effect_flag("--timing-log-level", A::One, "Megatron's timer detail"),
      no_effect_flag("--log-timers-to-tensorboard", A::Switch, "Megatron's timers in TensorBoard"),
      no_effect_flag("--log-memory-to-tensorboard", A::Switch, "Megatron's memory scalars in TensorBoard"),
      no_effect_flag("--log-validation-ppl-to-tensorboard", A::Switch,
                     "validation perplexity in TensorBoard (Strata logs it with the validation loss)"),
      no_effect_flag("--tensorboard-queue-size", A::One, "TensorBoard's writer queue"),
      no_effect_flag("--manual-gc", A::Switch, "Python's garbage collection schedule"),
      // Megatron's deprecated add_position_embedding=False: no learned positions, which RoPE has
      // none of anyway; without RoPE Megatron refuses it (StrataConfig::load does too).
      no_effect_flag("--no-position-embedding", A::Switch, "no learned position table next to RoPE"),
      no_effect_flag("--use-pytorch-profiler", A::Switch,
                     "PyTorch's profiler (--profile writes Strata's own Chrome trace; NVTX ranges on CUDA)"),
      no_effect_flag("--manual-gc-interval", A::One, "Python's garbage collection schedule"),
      no_effect_flag("--empty-unused-memory-level", A::One, "emptying PyTorch's CUDA cache allocator"),
      // Megatron features Strata does not have. A rule with a field maps onto it once it exists.
      unsupported_flag("--apply-query-key-layer-scaling", A::Switch,
                       "query-key layer scaling (Megatron's fp16 attention-score scaling by the layer number)"),
      unsupported_flag("--fp8-*", A::One, "FP8 training"),
      unsupported_flag("--fp4-*", A::One, "FP4 training"),
      // MoE: --num-experts and the --moe-* flags map by name onto model.num_experts and model.moe_*.
      // Recompute: --recompute-granularity/-method/-num-layers/-modules, --distribute-saved-activations
      // and --moe-layer-recompute map by name onto model.recompute_* (models/config/recompute_config.h).
      unsupported_flag("--num-layers-per-virtual-pipeline-stage", A::One,
                       "layers per virtual stage; set --num-virtual-stages-per-pipeline-rank (model chunks per "
                       "pipeline rank) instead"),
      unsupported_flag("--use-torch-fsdp2", A::Switch, "FSDP (use --use-distributed-optimizer)"),
      unsupported_flag("--use-megatron-fsdp", A::Switch, "FSDP (use --use-distributed-optimizer)"),
      unsupported_flag("--optimizer-cpu-offload", A::Switch, "optimizer CPU offload"),
      unsupported_flag("--tokenizer-sentencepiece-legacy", A::Switch,
                       "Megatron's legacy SentencePiece wrapper (special tokens added outside the model)"),
      unsupported_flag("--no-tokenizer-sentencepiece-ignore-extra-whitespaces", A::Switch,
                       "SentencePiece extra-whitespace preservation"),
      unsupported_flag("--no-save-optim", A::Switch, "checkpoints without optimizer state"),
      unsupported_flag("--no-save-rng", A::Switch, "checkpoints without RNG state"),
      unsupported_flag("--wandb-*", A::One, "Weights & Biases logging (Strata writes TensorBoard and JSONL)"),
      no_effect_flag("--spec", A::List,
                     "Megatron's standard layer spec, which Strata builds from the model section; custom specs "
                     "are not supported",
                     {"megatron.core.models.gpt.gpt_layer_specs get_gpt_layer_with_transformer_engine_spec",
                      "megatron.core.models.gpt.gpt_layer_specs get_gpt_layer_local_spec",
                      "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec",
                      "megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec", "local"}),
  };
  megatron_flags::append(rules, run_rules_without_field());
  megatron_flags::append(rules, megatron_flags::model_flag_rules());
  megatron_flags::append(rules, megatron_flags::run_flag_rules());
  megatron_flags::append(rules, megatron_flags::out_of_scope_flag_rules());
  return rules;
}

}  // namespace strata
