// Megatron-LM flags of whole families Strata leaves out of scope (see megatron_flag_families.h): RL,
// Megatron's inference engine and server, vision, retrieval biencoders and BERT embeddings, logits
// distillation, SFT, fault tolerance (ft_package, fault injection, in-process restart) and services
// Strata does not talk to (one-logger, OpenTelemetry, workload inspector, Multi-Storage Client), and
// the ModelOpt post-training flags (megatron/post_training/arguments.py add_modelopt_args): those that
// pick a layer implementation are accepted, those that quantize, distil or export are refused.
// A flag that asks for the family is refused naming it, and Strata's alternative where it has one;
// a spelling that leaves the family off (--no-X of a default-off option, a value meaning off) is
// accepted without effect. The CUDA-graph coverage flags Megatron files under "inference" and the
// cyclic data loader's --no-data-sharding under "vision" select implementation only.
// Reference: megatron/training/arguments.py (help texts), megatron/core/fault_injector.py.
#include "training/config/megatron_flag_families.h"

namespace strata::megatron_flags {

// Megatron RL (arguments.py _add_rl_args): the GRPO step, its rollouts and the inference model behind them.
static Rules rl_rules() {
  Rules r;
  append(r, refused("reinforcement learning (Megatron RL: GRPO rollouts and rewards); strata train pretrains and "
                    "fine-tunes",
                    {"--perform-rl-step",
                     "--langrl-env-config",
                     "--grpo-prompts-per-step",
                     "--grpo-group-size",
                     "--grpo-iterations",
                     "--grpo-clamp-eps-lower",
                     "--grpo-clamp-eps-upper",
                     "--grpo-kl-beta",
                     "--grpo-entropy-term-weight",
                     "--grpo-filter-groups-with-same-reward",
                     "--rl-prompts-per-eval",
                     "--rl-generation-lag",
                     "--rl-max-inflight-requests",
                     "--rl-submission-granularity",
                     "--rl-consumption-granularity",
                     "--rl-partial-rollouts",
                     "--rl-durable-rollout-bank",
                     "--rl-rollout-bank-dir",
                     "--rl-rollout-bank-max-bytes",
                     "--rl-default-temperature",
                     "--rl-default-top-p",
                     "--rl-default-top-k",
                     "--rl-inference-parsers",
                     "--rl-inference-logprobs-is-correction",
                     "--rl-importance-sampling-truncation-coef",
                     "--rl-use-sequence-packing",
                     "--rl-sequence-packing-max-sequences-per-bin",
                     "--rl-sequence-packing-algo",
                     "--rl-skip-bos-token",
                     "--rl-offload-optimizer-during-inference",
                     "--rl-kv-cache-management-mode",
                     "--rl-persist-cuda-graphs",
                     "--rl-training-cuda-graphs",
                     "--rl-inference-tensor-model-parallel-size",
                     "--rl-inference-pipeline-model-parallel-size",
                     "--rl-inference-expert-model-parallel-size",
                     "--rl-inference-expert-tensor-model-parallel-size",
                     "--rl-inference-model-unified-memory-level",
                     "--rl-offload-inference-model-weights-when-idle",
                     "--refit-method",
                     "--rl-verify-model-weights-swap",
                     "--rl-profile",
                     "--rl-profile-dir"}));
  // The --no- spellings of RL's default-off switches: the RL option off, as Megatron has it by default.
  append(r, without_effect(
                "an RL option off, Megatron's default (Strata has no RL)",
                {"--no-rl-partial-rollouts", "--no-rl-inference-logprobs-is-correction", "--no-rl-use-sequence-packing",
                 "--no-rl-skip-bos-token", "--no-rl-persist-cuda-graphs", "--no-rl-training-cuda-graphs",
                 "--no-rl-offload-inference-model-weights-when-idle", "--no-rl-verify-model-weights-swap"}));
  return r;
}

static const char* const kInferenceEngine =
    "Megatron's inference engine and text-generation server; use `strata generate` (KV-cached sampling from a "
    "checkpoint)";

// Megatron's inference engine (arguments.py _add_inference_args): requests, sharding, sampling and logging.
static Rules inference_engine_rules() {
  Rules r;
  append(r, refused(kInferenceEngine,
                    {"--use-legacy-static-engine", "--inference-max-requests", "--inference-max-seq-length",
                     "--max-tokens-to-oom", "--inference-shards", "--inference-coordinator-port",
                     "--inference-use-synchronous-zmq-collectives", "--inference-disable-ep-consensus",
                     "--use-same-sampling-seed-across-dp-ranks", "--mamba-inference-conv-states-dtype",
                     "--mamba-inference-ssm-states-dtype", "--enable-chunked-prefill", "--decode-only-cuda-graphs",
                     "--inference-cuda-graph-all-prefills", "--inference-cuda-graph-max-tokens",
                     "--inference-text-gen-server-logging", "--inference-wandb-logging"}));
  // Values that leave an engine feature off: speculative decoding, pipelined batch splitting, metric logging.
  r.push_back(accepted_values("--num-speculative-tokens",
                              "speculative decoding in Megatron's inference engine; 0 is off", {"0"}));
  r.push_back(accepted_values("--inference-batch-times-seqlen-threshold",
                              "pipelined batch splitting in Megatron's inference engine; -1 is off", {"-1"}));
  r.push_back(accepted_values("--inference-logging-step-interval",
                              "metric logging of Megatron's inference engine; 0 is off", {"0"}));
  // The --no- spellings of the engine's default-off switches.
  append(r, without_effect("an option of Megatron's inference engine off, its default (Strata has no such engine)",
                           {"--no-inference-use-synchronous-zmq-collectives", "--no-inference-disable-ep-consensus",
                            "--no-inference-text-gen-server-logging", "--no-inference-wandb-logging",
                            "--no-inference-dynamic-batching-prefix-caching"}));
  // Training CUDA-graph coverage, filed under "inference" by Megatron: kernel launches replayed, the same numbers.
  append(r, without_effect("the layer parts Megatron captures in CUDA graphs (launch overhead only; Strata has no "
                           "CUDA graphs)",
                           {"--cuda-graph-modules", "--cuda-graph-scope"}));
  return r;
}

// The dynamic-batching engine behind Megatron's server: KV-cache pool, CUDA graphs, prefix caching.
static Rules inference_batching_rules() {
  return refused(kInferenceEngine, {"--inference-dynamic-batching",
                                    "--inference-dynamic-batching-async-sched-mode",
                                    "--inference-dynamic-batching-block-size",
                                    "--inference-dynamic-batching-buffer-size-gb",
                                    "--inference-dynamic-batching-paused-buffer-size-gb",
                                    "--inference-dynamic-batching-mamba-memory-ratio",
                                    "--inference-dynamic-batching-unified-memory-level",
                                    "--inference-dynamic-batching-max-requests",
                                    "--inference-dynamic-batching-max-tokens",
                                    "--inference-dynamic-batching-num-cuda-graphs",
                                    "--inference-dynamic-batching-cuda-graph-mixed-prefill-count",
                                    "--inference-dynamic-batching-cuda-graph-sizing-distribution",
                                    "--inference-dynamic-batching-prefix-caching",
                                    "--inference-dynamic-batching-prefix-caching-eviction-policy",
                                    "--inference-dynamic-batching-prefix-caching-coordinator-policy",
                                    "--inference-dynamic-batching-prefix-caching-routing-alpha",
                                    "--inference-dynamic-batching-prefix-caching-mamba-gb",
                                    "--inference-dynamic-batching-sampling-backend",
                                    "--inference-dynamic-batching-logprobs-mode",
                                    "--inference-dynamic-batching-track-paused-request-events",
                                    "--inference-dynamic-batching-track-generated-token-events"});
}

// Vision (arguments.py _add_vision_args), retrieval biencoders (_add_biencoder_args) and BERT embeddings.
static Rules vision_and_retrieval_rules() {
  Rules r;
  append(r, refused("vision and multimodal models (Megatron's ViT, MiT and Swin pretraining: classification, "
                    "inpainting, DINO); Strata trains text language models",
                    {"--vision-pretraining",
                     "--vision-pretraining-type",
                     "--vision-backbone-type",
                     "--swin-backbone-type",
                     "--num-classes",
                     "--img-h",
                     "--img-w",
                     "--num-channels",
                     "--patch-dim",
                     "--classes-fraction",
                     "--data-per-class-fraction",
                     "--head-lr-mult",
                     "--mask-type",
                     "--mask-factor",
                     "--iter-per-epoch",
                     "--dino-local-img-size",
                     "--dino-local-crops-number",
                     "--dino-head-hidden-size",
                     "--dino-bottleneck-size",
                     "--dino-freeze-last-layer",
                     "--dino-norm-last-layer",
                     "--dino-warmup-teacher-temp",
                     "--dino-teacher-temp",
                     "--dino-warmup-teacher-temp-epochs"}));
  append(r, refused("retrieval biencoder models (ICT, ORQA and REALM: BERT query and context encoders, a FAISS "
                    "evidence index)",
                    {"--ict-head-size", "--biencoder-projection-dim", "--biencoder-shared-query-context-model",
                     "--ict-load", "--bert-load", "--titles-data-path", "--query-in-block-prob", "--use-one-sent-docs",
                     "--evidence-data-path", "--retriever-report-topk-accuracies", "--retriever-score-scaling",
                     "--block-data-path", "--embedding-path", "--indexer-batch-size", "--indexer-log-interval"}));
  // Filed under "inference" by Megatron: the BERT embedder that builds retrieval databases.
  append(r, refused("BERT embeddings (Megatron's or Hugging Face's BERT embedder for retrieval databases)",
                    {"--output-bert-embeddings", "--bert-embedder-type"}));
  return r;
}

// Other training objectives: logits distillation (_add_logits_distillation_args) and SFT (_add_sft_args).
static Rules objective_rules() {
  Rules r;
  append(r, refused("knowledge distillation from a teacher model's logits (saving a teacher's top-k "
                    "log-probabilities, training a student on them)",
                    {"--logits-save-dir", "--logits-save-top-k", "--logits-save-top-p", "--logits-save-top-p-min-k",
                     "--logits-save-dtype", "--logits-load-dir", "--logits-load-decode-threads",
                     "--logits-load-prefetch-factor", "--logits-load-msc-prefetch-depth", "--logits-load-kd-loss-alpha",
                     "--logits-load-ignore-errors"}));
  append(r, refused("Megatron's SFT chat datasets (conversations in a prompt format, prompt tokens masked from the "
                    "loss); to fine-tune on text, tokenize it to .bin/.idx with `strata preprocess` and load the "
                    "checkpoint with --finetune",
                    {"--sft", "--sft-tokenizer-prompt-format"}));
  return r;
}

// Fault tolerance: in-process restart, the ft_package and the fault injector (nvidia-resiliency-ext).
static Rules resilience_rules() {
  Rules r;
  append(r, refused("in-process restart (nvidia-resiliency-ext); Strata resumes from its last checkpoint when "
                    "relaunched with --load",
                    {"--inprocess-restart", "--inprocess-max-iterations", "--inprocess-monitor-thread-interval",
                     "--inprocess-monitor-process-interval", "--inprocess-progress-watchdog-interval",
                     "--inprocess-heartbeat-interval", "--inprocess-soft-timeout", "--inprocess-hard-timeout",
                     "--inprocess-heartbeat-timeout", "--inprocess-barrier-timeout", "--inprocess-completion-timeout",
                     "--inprocess-last-call-wait", "--inprocess-termination-grace-time", "--inprocess-granularity",
                     "--inprocess-active-world-size", "--inprocess-empty-cuda-cache"}));
  append(r, refused("NVIDIA's fault-tolerance package (nvidia-resiliency-ext rank monitors and hang timeouts); "
                    "Strata resumes from its last checkpoint when relaunched with --load",
                    {"--enable-ft-package", "--calc-ft-timeouts", "--ft-num-warmup-iters"}));
  // No value turns the injector off (probabilities are normalised; --fault-injector-num-ranks 0 still sets it
  // up, needing fault types and nvidia-resiliency-ext): every one of them asks for injected faults.
  append(r, refused("fault injection for resilience testing (nvidia-resiliency-ext: hangs and crashes on "
                    "chosen ranks)",
                    {"--fault-injector-ranks", "--fault-injector-num-ranks", "--fault-injector-fault-types",
                     "--fault-injector-fault-probabilities", "--fault-injector-fault-delay",
                     "--fault-injector-delay-start-iteration", "--fault-injector-mtti-seconds",
                     "--fault-injector-offset-seconds", "--fault-injector-seed"}));
  return r;
}

// Services Strata does not talk to: one-logger, OpenTelemetry, the workload inspector, Multi-Storage Client.
static Rules service_rules() {
  Rules r;
  append(r, refused("NVIDIA one-logger telemetry (an NVIDIA-internal service); Strata writes TensorBoard and JSONL",
                    {"--one-logger-project", "--one-logger-run-name", "--one-logger-async", "--app-tag-run-name",
                     "--app-tag-run-version"}));
  append(r, without_effect("no NVIDIA one-logger telemetry (Strata has none)", {"--no-one-logger"}));
  append(r, refused("OpenTelemetry export (traces and metrics); Strata writes TensorBoard and JSONL, and --profile "
                    "a Chrome trace",
                    {"--otel-enabled", "--otel-service-name", "--otel-span-groups"}));
  append(r, refused("NVIDIA's workload inspector server (on-demand profiling); use --profile for Strata's trace",
                    {"--run-workload-inspector-server"}));
  append(r, refused("NVIDIA Multi-Storage Client (object-storage paths such as msc://); Strata reads datasets and "
                    "checkpoints from the file system",
                    {"--enable-msc"}));
  // Deprecated in Megatron: a no-op, MSC being off by default.
  append(r, without_effect("no Multi-Storage Client (deprecated, a no-op in Megatron)", {"--disable-msc"}));
  return r;
}

// ModelOpt post-training (add_modelopt_args, the modelopt example model files pass some of them).
static Rules modelopt_rules() {
  Rules r;
  append(r, without_effect("the model class ModelOpt's model_provider builds (Strata builds GPT or hybrid from "
                           "the model section: --hybrid-layer-pattern)",
                           {"--export-model-type"}));
  append(r, without_effect("Transformer Engine or local layer implementations for ModelOpt's model (the same "
                           "numbers)",
                           {"--export-te-mcore-model", "--export-default-te-spec", "--export-force-local-attention"}));
  r.push_back(accepted_values("--export-kv-cache-quant", "ModelOpt's KV-cache quantization; none is off", {"none"}));
  append(r, refused("ModelOpt quantization (quantization-aware training and quantized export)",
                    {"--export-quant-cfg", "--export-real-quant-cfg", "--qad-train-target"}));
  append(r, refused("ModelOpt knowledge distillation from a teacher model",
                    {"--export-kd-cfg", "--export-kd-teacher-load", "--export-kd-teacher-model-config",
                     "--export-kd-teacher-ckpt-format"}));
  append(r, refused("ModelOpt's legacy Megatron-LM and offline-model checkpoints",
                    {"--export-legacy-megatron", "--export-offline-model", "--modelopt-enabled"}));
  append(r, refused("ModelOpt's finetuning on a Hugging Face dataset; tokenize it to .bin/.idx with "
                    "`strata preprocess`",
                    {"--finetune-hf-dataset", "--finetune-data-split", "--finetune-data-files"}));
  append(r, refused("freezing the base model to train only the MTP layers", {"--freeze-base-for-mtp"}));
  append(r, refused("query/key L2 normalisation (Llama 4); Strata has --qk-layernorm", {"--export-qk-l2-norm"}));
  // --enable-gpt-oss maps by name onto model.enable_gpt_oss (GPT-OSS's YaRN, as ModelOpt's builder sets it).
  r.push_back(config::constant_flag("--export-moe-apply-probs-on-input", "moe_apply_probs_on_input", "true"));
  return r;
}

Rules out_of_scope_flag_rules() {
  Rules r;
  append(r, rl_rules());
  append(r, inference_engine_rules());
  append(r, inference_batching_rules());
  append(r, vision_and_retrieval_rules());
  append(r, objective_rules());
  append(r, resilience_rules());
  append(r, service_rules());
  append(r, modelopt_rules());
  return r;
}

}  // namespace strata::megatron_flags
