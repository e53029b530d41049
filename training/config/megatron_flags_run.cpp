// Megatron-LM flags without a Strata field (see megatron_flag_families.h): the training loop,
// checkpointing, distributed initialisation and Megatron-FSDP, data and the data loader, logging,
// validation and profiling, optimizer settings other than Adam's, initialisation and RNG, the rerun
// state machine, ADLR autoresume, the tokenizer and Megatron's "experimental" group.
// A flag that asks for something Strata lacks is refused naming it (and Strata's alternative); a
// value that selects what Strata does is accepted, others refused. A setting read only while a
// feature Strata refuses is on (the FIM rates, Megatron-FSDP's buffers, the Muon and Lion settings)
// is accepted without effect, as Megatron itself ignores it then. Communication, timeout, worker and
// allocator tuning selects Megatron's implementation only: accepted without effect.
// Reference: megatron/training/arguments.py (help texts and validate_args), megatron/training/config/
// {training,common,resilience}_config.py, megatron/core/distributed/distributed_data_parallel_config.py,
// megatron/core/rerun_state_machine.py, megatron/core/tokenizers/utils/build_tokenizer.py,
// megatron/training/checkpointing.py, pretrain_gpt.py.
#include "training/config/megatron_flag_families.h"

namespace strata::megatron_flags {

static const char* const kRerun =
    "the rerun state machine (validating results by re-running steps: spiky-loss and large-gradient checks, "
    "error injection, rejected-result tracking); Strata skips a non-finite step, or stops with --exit-on-nan";
static const char* const kCheckpointFormat =
    "older spellings of the checkpoint format choice (Megatron itself ignores --dist-ckpt-format); the format is "
    "checkpoint.ckpt_format (--ckpt-format), and loading detects it";
static const char* const kParallelLoad = "Megatron's parallel checkpoint loading";
static const char* const kParallelSave = "Megatron's checkpoint saving strategy";
static const char* const kGc = "Python's garbage collection schedule";

// The training loop (arguments.py _add_training_args, training_config.py TrainingConfig).
static Rules training_rules() {
  Rules r;
  // Removed from Megatron (validate_args rejects them): each names its replacement.
  append(r, refused("Megatron's removed --batch-size; use --micro-batch-size", {"--batch-size"}));
  append(r, refused("Megatron's removed --checkpoint-activations; use --recompute-activations or "
                    "--recompute-granularity",
                    {"--checkpoint-activations"}));
  append(r, refused("Megatron's removed --model-parallel-size; use --tensor-model-parallel-size",
                    {"--model-parallel-size"}));
  append(r, refused("Megatron's removed --warmup; use --lr-warmup-fraction or --lr-warmup-iters", {"--warmup"}));
  // Signals: Strata stops at the next step boundary on SIGTERM and SIGINT, saving when --save is set.
  r.push_back(accepted_values("--exit-signal",
                              "the signal that saves and exits (Strata handles SIGTERM and SIGINT)",
                              {"SIGTERM", "SIGINT"}));
  // Signal handlers Megatron installs on request; Strata's is always installed.
  append(r, without_effect("an orderly exit on SIGINT/SIGTERM (Strata always stops at the next step boundary, "
                           "saving a checkpoint when --save is set)",
                           {"--exit-signal-handler-for-training"}));
  append(r, without_effect("a signal handler in the data-loader worker processes (Strata has none)",
                           {"--exit-signal-handler-for-dataloader"}));
  // Python GC around evaluation: Strata has no garbage collector to schedule.
  append(r, without_effect(kGc, {"--no-manual-gc-eval", "--disable-manual-gc-eval"}));
  // Host-side scheduling and kernel launches: the same numbers.
  append(r, without_effect("a CPU-GPU synchronisation every N iterations (how far the host runs ahead)",
                           {"--train-sync-interval"}));
  append(r, without_effect("a CUDA graph of the optimizer step (launch overhead only)", {"--optimizer-cuda-graph"}));
  append(r, without_effect("Transformer Engine's userbuffer configuration for TP communication overlap",
                           {"--tp-comm-overlap-cfg"}));
  // Read only with --optimizer-cpu-offload, which Strata refuses.
  append(r, without_effect("optimizer CPU offload settings, read only with --optimizer-cpu-offload (which Strata "
                           "refuses)",
                           {"--optimizer-offload-fraction", "--use-torch-optimizer-for-cpu-offload",
                            "--overlap-cpu-optimizer-d2h-h2d", "--no-pin-cpu-grads", "--no-pin-cpu-params"}));
  // Changes to which batches train, and files Strata does not write.
  append(r, refused("skipping chosen iterations (their batches consumed untrained)", {"--iterations-to-skip"}));
  append(r, refused("shrinking the global batch size to fit the data-parallel size",
                    {"--decrease-batch-size-if-needed"}));
  append(r, refused("GPU sniff tests (per-rank GEMM and communication throughput checks); Strata logs each "
                    "step's time",
                    {"--gpu-sniff-test-interval"}));
  append(r, refused("writing the parameter-to-parameter-group map to a JSON file",
                    {"--dump-param-to-param-group-map"}));
  // RoPE variants: plain RoPE only.
  return r;
}

// The rerun state machine, ADLR autoresume and Megatron's YAML/experimental switches.
static Rules resilience_rules() {
  Rules r;
  // Checks and bookkeeping of the rerun state machine.
  append(r, refused(kRerun, {"--check-for-spiky-loss", "--check-for-large-grads",
                             "--result-rejected-tracker-filename"}));
  // The values that leave the rerun state machine and its error injection off.
  r.push_back(accepted_values("--rerun-mode", "the rerun state machine off, as Strata has none", {"disabled"}));
  r.push_back(accepted_values("--error-injection-rate", "no injected errors (0)", {"0"}));
  // Read only with a non-zero --error-injection-rate.
  append(r, without_effect("the kind of error the rerun state machine injects, read only with a non-zero "
                           "--error-injection-rate (which Strata refuses)",
                           {"--error-injection-type"}));
  // ADLR autoresume: Strata stops on SIGTERM and is relaunched with --load.
  append(r, refused("ADLR cluster autoresume; Strata saves on SIGTERM and resumes with --load", {"--adlr-autoresume"}));
  // Read only with --adlr-autoresume.
  append(r, without_effect("how often ADLR autoresume is polled, read only with --adlr-autoresume (which Strata "
                           "refuses)",
                           {"--adlr-autoresume-interval"}));
  // Megatron's own configuration switches.
  append(r, refused("Megatron's YAML argument file; pass Strata's YAML with --config", {"--yaml-cfg"}));
  append(r, without_effect("Megatron's gate for its experimental code paths (each feature has its own flag)",
                           {"--enable-experimental"}));
  return r;
}

// Checkpoints: what they hold and how they are written (training_config.py CheckpointConfig).
static Rules checkpoint_content_rules() {
  Rules r;
  // Megatron's checkpoint converter and legacy distributed-optimizer format.
  append(r, refused("converting Megatron checkpoints (Strata reads and writes its own format; strata import and "
                    "strata export convert Hugging Face models)",
                    {"--ckpt-convert-format", "--ckpt-convert-save", "--ckpt-convert-update-legacy-dist-opt-format"}));
  // Which iteration, and which parts of it, a resume loads.
  append(r, refused("loading a chosen iteration instead of the latest", {"--ckpt-step"}));
  append(r, refused("overriding the loaded checkpoint's iteration (and with it the data position)",
                    {"--override-ckpt-iteration"}));
  append(r, refused("loading the f32 master weights without the rest of the optimizer state (with "
                    "--no-load-optim Strata starts them from the loaded weights)",
                    {"--load-main-params-from-ckpt"}));
  // What a checkpoint holds besides the model and optimizer.
  append(r, refused("checkpoints without their tokenizer files (Strata copies them into every iteration)",
                    {"--no-save-tokenizer-assets", "--disable-save-tokenizer-assets"}));
  // Partial loading (FSDP DTensor checkpoints).
  append(r, refused("loading a checkpoint that lacks some of the model's tensors; --finetune loads the tensors the "
                    "two share",
                    {"--no-strict-fsdp-dtensor-load", "--disable-strict-fsdp-dtensor-load"}));
  // Non-persistent checkpoints: the switch and interval ask for them; their places need the type.
  append(r, refused("non-persistent checkpoints (Megatron's frequent global or node-local checkpoints beside "
                    "--save); Strata writes every checkpoint to --save at --save-interval",
                    {"--non-persistent-ckpt-type", "--non-persistent-save-interval"}));
  append(r, without_effect("where and how non-persistent checkpoints are written, read only with "
                           "--non-persistent-ckpt-type (which Strata refuses)",
                           {"--non-persistent-global-ckpt-dir", "--non-persistent-local-ckpt-dir",
                            "--non-persistent-local-ckpt-algo"}));
  // Periodic tensor dumps beside the checkpoints.
  append(r, refused("periodic dumps of parameters, activations, weight and input gradients, and tokens per "
                    "expert; the tensor dumper (--tensor-dump-sites, --tensor-dump-iters) writes chosen forward "
                    "tensors",
                    {"--save-params-interval", "--save-activations-interval", "--save-wgrads-interval",
                     "--save-dgrads-interval", "--save-tokens-per-expert-interval"}));
  // Replication of node-local checkpoints: --replication asks for it, the rest needs it.
  append(r, refused("replicating node-local checkpoints on other nodes (nvidia-resiliency-ext)", {"--replication"}));
  append(r, without_effect("the replica placement of node-local checkpoints, read only with --replication (which "
                           "Strata refuses)",
                           {"--replication-factor", "--replication-jump"}));
  // Settings of --use-checkpoint-args beyond the architecture it takes: a resumed run keeps its own.
  append(r, without_effect("the config's tokenizer rather than the checkpoint's saved arguments, which Strata "
                           "always uses",
                           {"--no-use-tokenizer-model-from-checkpoint-args",
                            "--disable-use-tokenizer-model-from-checkpoint-args"}));
  append(r, without_effect("parallel sizes from the checkpoint's saved arguments (with --use-checkpoint-args): "
                           "Strata loads a checkpoint under any layout and keeps the command line's",
                           {"--use-mp-args-from-checkpoint-args"}));
  return r;
}

// How Megatron writes and reads its distributed checkpoints: Strata's are its own (docs/formats.md).
static Rules checkpoint_io_rules() {
  Rules r;
  // Older spellings of Megatron's checkpoint format choice (checkpoint.ckpt_format is --ckpt-format).
  append(r, without_effect(kCheckpointFormat,
                           {"--dist-ckpt-format", "--use-dist-ckpt", "--dist-ckpt-save-pre-mcore-014"}));
  // Parallel saving and loading strategies of torch_dist checkpoints.
  append(r, without_effect(kParallelSave, {"--ckpt-fully-parallel-save", "--ckpt-fully-parallel-save-process-group",
                                           "--ckpt-assume-constant-structure"}));
  append(r, without_effect(kParallelLoad, {"--ckpt-fully-parallel-load-exchange-algo",
                                           "--ckpt-fully-parallel-load-per-rank-objects",
                                           "--ckpt-fully-parallel-load-process-group"}));
  // The shard-distribution cache of Megatron's parallel save and load.
  append(r, without_effect("a file cache of Megatron's checkpoint shard distribution (it saves a collective per "
                           "save and load)",
                           {"--ckpt-pg-tensors-cache-create", "--ckpt-pg-tensors-cache-path"}));
  // Checks and reshardability Strata's checkpoints always have.
  append(r, without_effect("skipping Megatron's sharding-integrity check (Strata always checks that the pieces "
                           "cover every tensor)",
                           {"--no-ckpt-load-validate-sharding-integrity",
                            "--disable-ckpt-load-validate-sharding-integrity"}));
  append(r, without_effect("an optimizer checkpoint that loads under any parallel layout (Strata's always does)",
                           {"--dist-ckpt-optim-fully-reshardable", "--distrib-optim-fully-reshardable-mem-efficient"}));
  // Transformer Engine state Strata does not have.
  append(r, without_effect("dropping Transformer Engine's _extra_state from checkpoints (Strata's have none)",
                           {"--ckpt-drop-redundant-extra-state"}));
  // File checksums: Strata's manifest always has them.
  append(r, without_effect("checksums of the checkpoint files (Strata's manifest always records each file's "
                           "CRC-32C and checks it on load)",
                           {"--verify-integrity"}));
  // Megatron's writer processes behind --async-save; Strata's is one thread per rank.
  append(r, without_effect("how Megatron's asynchronous checkpoint writer runs (strategy, persistent worker "
                           "process, worker count, CPU and I/O priorities, shared memory); Strata's --async-save "
                           "writes with one background thread per rank, with or without them",
                           {"--async-strategy", "--use-persistent-ckpt-worker", "--dist-ckpt-workers",
                            "--async-ckpt-cpu-priority", "--async-ckpt-io-priority", "--async-ckpt-use-cpu-shm"}));
  return r;
}

// Process groups, collectives and their tuning (common_config.py DistributedInitConfig, the DDP config).
static Rules distributed_rules() {
  Rules r;
  // NCCL tuning: the same numbers with any setting.
  append(r, without_effect("NCCL communicator tuning (thread blocks, stream priorities, user-buffer "
                           "registration, SHARP in-network reductions)",
                           {"--nccl-communicator-config-path", "--high-priority-stream-groups", "--use-nccl-ub",
                            "--disable-symmetric-registration", "--gtp-remat-nccl-ub", "--gtp-expert-remat-nccl-ub",
                            "--use-sharp", "--sharp-enabled-group"}));
  // Host communicators and timeouts.
  append(r, without_effect("gloo process groups (Strata's host communicator is MPI)",
                           {"--disable-gloo-process-groups"}));
  append(r, without_effect("a collective timeout after the first iteration (Strata's is "
                           "--distributed-timeout-minutes)",
                           {"--distributed-timeout-seconds-after-init"}));
  // When collectives are launched and over which communicator.
  append(r, without_effect("when and on which communicator the gradient and parameter collectives are launched "
                           "(Strata's reductions give the same numbers for any schedule)",
                           {"--create-all-gather-group", "--overlap-param-gather-with-optimizer-step",
                            "--no-align-grad-reduce", "--disable-align-grad-reduce", "--no-align-param-gather",
                            "--no-overlap-p2p-communication"}));
  // Bucket padding: where the gradients lie in the buffer, not their values.
  append(r, without_effect("gradient buckets padded for NCCL bus bandwidth (the buffer's layout, not its values)",
                           {"--ddp-pad-buckets-for-high-nccl-busbw"}));
  // Where the 1/dp of the gradient average is applied: the same average.
  append(r, without_effect("averaging the gradients in the data-parallel collective instead of scaling by 1/dp "
                           "first (the same average; Strata's f32 reduction averages in the collective, its "
                           "16-bit one scales first, as Megatron's default)",
                           {"--ddp-average-in-collective"}));
  // FP32 accumulation of bf16 gradients: other numbers than --grad-reduce-in-bf16.
  append(r, refused("FP32 accumulation of 16-bit gradients in the reduce-scatter or for chosen parameters; with "
                    "--grad-reduce-in-bf16 Strata accumulates and reduces every gradient in bf16",
                    {"--ddp-reduce-scatter-with-fp32-accumulation",
                     "--ddp-param-name-patterns-for-fp32-local-accumulation"}));
  // GTP weight rematerialisation (--tensor-parallel-num-weight-shards).
  append(r, without_effect("the reduce-scatter of GTP weight rematerialisation, read only with "
                           "--tensor-parallel-num-weight-shards (which Strata does not have)",
                           {"--gtp-remat-reduce-scatter-with-fp32-accumulation"}));
  // The distributed optimizer shards over the whole data-parallel group.
  r.push_back(accepted_values("--num-distributed-optimizer-instances",
                              "one distributed-optimizer instance over the whole data-parallel group, Strata's "
                              "(partial sharding is not supported)",
                              {"1"}));
  // Layouts and rank placement Strata does not build.
  append(r, refused("a custom pipeline layout string; use --decoder-first-pipeline-num-layers and "
                    "--decoder-last-pipeline-num-layers",
                    {"--pipeline-model-parallel-layout"}));
  append(r, refused("the tp-cp-ep-pp-dp rank order (Strata places ranks in Megatron's default order, "
                    "tp-cp-ep-dp-pp)",
                    {"--use-tp-pp-dp-mapping"}));
  // Ways of running without real communication or initialisation.
  append(r, refused("a fake process group without communication (memory profiling); `strata plan` estimates a "
                    "layout's memory per rank",
                    {"--fake-process-group"}));
  append(r, refused("deferred model-parallel initialisation for an external DDP manager", {"--lazy-mpu-init"}));
  // TorchScript fusion: kernels only.
  append(r, without_effect("PyTorch's JIT fuser", {"--disable-jit-fuser"}));
  // PyTorch's NCCL flight recorder: Strata's watchdog prints the collectives in flight on a timeout.
  append(r, refused("PyTorch's NCCL flight recorder dumps; Strata's watchdog prints the collectives in flight "
                    "when one times out",
                    {"--flight-recorder-dump-path", "--flight-recorder-include-stack-trace"}));
  // The flight recorder's buffer: only 0 (off) is what Strata does.
  r.push_back(accepted_values("--flight-recorder-trace-buffer-size",
                              "the NCCL flight recorder's buffer; 0 turns it off (Strata has no flight recorder)",
                              {"0"}));
  // The --no- spellings turn parts of the flight recorder off.
  append(r, without_effect("a part of PyTorch's NCCL flight recorder off (Strata has none)",
                           {"--no-flight-recorder-dump-on-timeout", "--disable-flight-recorder-dump-on-timeout",
                            "--no-flight-recorder-extra-dump-on-exec", "--disable-flight-recorder-extra-dump-on-exec",
                            "--no-flight-recorder-include-only-active",
                            "--disable-flight-recorder-include-only-active"}));
  return r;
}

// Megatron-FSDP and torch FSDP2: read only with --use-megatron-fsdp / --use-torch-fsdp2, which Strata refuses.
static Rules fsdp_rules() {
  return without_effect(
      "a setting of Megatron-FSDP or torch FSDP2, read only with --use-megatron-fsdp or --use-torch-fsdp2 (which "
      "Strata refuses; --use-distributed-optimizer shards the optimizer state)",
      {"--data-parallel-sharding-strategy", "--outer-dp-sharding-strategy", "--enable-full-sharding-in-hsdp",
       "--megatron-fsdp-version", "--megatron-fsdp-main-params-dtype", "--megatron-fsdp-main-grads-dtype",
       "--megatron-fsdp-grad-comm-dtype", "--megatron-fsdp-enable-fine-grained-param-gather",
       "--megatron-fsdp-max-pool-double-buffer", "--fsdp-double-buffer", "--fsdp-manual-registration",
       "--fsdp-db-use-persist-buf-on-alloc-fail", "--suggested-communication-unit-size", "--keep-fp8-transpose-cache",
       "--torch-fsdp2-no-reshard-after-forward", "--no-gradient-reduce-div-fusion"});
}

// Datasets and the data loader (arguments.py _add_data_args, pretrain_gpt.py's dataset config).
static Rules data_rules() {
  Rules r;
  // Where the dataset list comes from, and phases of datasets.
  append(r, refused("reading the --data-path blend from a file; pass --data-path", {"--data-args-path"}));
  append(r, refused("training phases (datasets rebuilt, and the run stopped, at given iterations)",
                    {"--phase-transition-iterations"}));
  // Datasets outside the file system.
  append(r, refused("object-storage datasets (S3 or MSC paths); Strata reads datasets from the file system",
                    {"--object-storage-cache-path"}));
  // Loss masking at pad tokens that collide with another special token.
  append(r, refused("masking the loss at a pad token id shared with another special token",
                    {"--allow-ambiguous-pad-tokens"}));
  // The blended dataset's surplus: Strata builds 0.5 % more samples, as Megatron's default.
  r.push_back(accepted_values("--mid-level-dataset-surplus",
                              "the sample surplus of each blended dataset: 0.005, Strata's", {"0.005"}));
  // Dataset index building and caching: the same samples.
  append(r, without_effect("how Megatron builds and loads its cached dataset indices (Strata builds them in "
                           "memory and reads each .idx)",
                           {"--num-dataset-builder-threads", "--dataloader-fast-cache-load",
                            "--dataloader-defer-npy-index-mmap", "--per-dataset-sequences-path"}));
  // --seq-length's older name: Megatron sets seq_length from it when --seq-length is not given.
  r.push_back(config::rename_flag("--encoder-seq-length", "seq_length"));
  // Encoder-decoder and vision-language lengths.
  append(r, refused("a decoder sequence length (encoder-decoder and vision-language models); GPT models use "
                    "--seq-length",
                    {"--decoder-seq-length"}));
  // Settings of datasets Strata does not train on, or no longer read.
  append(r, without_effect("BERT and T5 masking settings, read only by Megatron's BERT and T5 datasets",
                           {"--mask-prob", "--short-seq-prob"}));
  append(r, without_effect("a sampling rate that Megatron's training no longer reads", {"--sample-rate"}));
  // Fill-in-the-middle: --fim-data asks for it; the rest is read only with --fim-data.
  append(r, refused("fill-in-the-middle (FIM) samples", {"--fim-data"}));
  append(r, without_effect("the FIM transformation's rates and tokens, read only with --fim-data (which Strata "
                           "refuses)",
                           {"--fim-rate", "--fim-spm-rate", "--fim-split-sample", "--fim-fragment-rate",
                            "--fim-no-prefix", "--fim-prefix-token", "--fim-middle-token", "--fim-suffix-token",
                            "--fim-pad-token", "--fim-eod-token"}));
  return r;
}

// The tokenizer (training_config.py TokenizerConfig, build_tokenizer.py).
static Rules tokenizer_rules() {
  Rules r;
  // SentencePiece: Megatron's default (extra whitespace ignored) only.
  append(r, refused("SentencePiece extra-whitespace preservation",
                    {"--disable-tokenizer-sentencepiece-ignore-extra-whitespaces"}));
  // HuggingFace tokenizers other than the tokenizer.json pipeline.
  append(r, refused("HuggingFace's slow (Python) tokenizers; Strata runs the tokenizer.json pipeline (the fast "
                    "tokenizer)",
                    {"--tokenizer-hf-no-use-fast"}));
  // Strata never runs a repository's Python code: it reads tokenizer.json (and refuses, naming the
  // file, a tokenizer directory that has none), so allowing that code changes nothing.
  append(r, without_effect("allowing a Hugging Face repository's own Python code (transformers' "
                           "trust_remote_code); Strata runs only the tokenizer.json pipeline",
                           {"--trust-remote-code"}));
  // Chat templates and Megatron-Core tokenizer metadata.
  append(r, refused("a custom chat template (Jinja) for the tokenizer", {"--chat-template"}));
  append(r, refused("Megatron-Core tokenizer metadata files; use --tokenizer-type with --tokenizer-model",
                    {"--tokenizer-metadata"}));
  // NullTokenizer: EOD vocab_size - 1 and no pad token.
  append(r, refused("a NullTokenizer EOD id of choice (Strata's is --vocab-size minus 1)",
                    {"--null-tokenizer-eod-id"}));
  r.push_back(accepted_values("--null-tokenizer-pad-id", "NullTokenizer without a pad token (-1), as Strata's",
                              {"-1"}));
  // Implementations and settings that give the same ids.
  append(r, without_effect("GigaToken's implementation of HuggingFace tokenization (the same ids)",
                           {"--use-gigatoken"}));
  append(r, without_effect("T5's extra vocabulary ids, which Megatron's tokenizers no longer read",
                           {"--vocab-extra-ids"}));
  // Megatron then needs --padded-vocab-size (or the checkpoint's), which Strata uses as given.
  append(r, without_effect("no padding of the tokenizer's vocabulary when --padded-vocab-size is not given "
                           "(Megatron then needs --padded-vocab-size, which Strata uses as given)",
                           {"--no-pad-vocab-size", "--disable-pad-vocab-size"}));
  return r;
}

// Logging, validation and profiling (training_config.py LoggerConfig, ValidationConfig, ProfilingConfig).
static Rules logging_rules() {
  Rules r;
  // Logging Strata does in its own form, or that leaves something out.
  append(r, without_effect("Megatron's memory reports (Strata writes mem-allocated-bytes and "
                           "mem-max-allocated-bytes with every log line)",
                           {"--log-memory-interval", "--log-device-memory-used"}));
  append(r, without_effect("leaving the loss scale out of TensorBoard (Strata writes loss-scale with every log line)",
                           {"--no-log-loss-scale-to-tensorboard", "--disable-log-loss-scale-to-tensorboard"}));
  append(r, without_effect("the world size in TensorBoard (Strata logs the layout when it starts)",
                           {"--log-world-size-to-tensorboard"}));
  // Megatron's timers and Python logging.
  append(r, without_effect("how Megatron's timers are reduced over ranks and synchronised",
                           {"--timing-log-option", "--no-barrier-with-level-1-timing"}));
  append(r, without_effect("the level of Python's logging module", {"--logging-level"}));
  // Log content Strata does not write.
  append(r, refused("TensorBoard at an interval of its own; Strata writes TensorBoard with each log line, every "
                    "--log-interval",
                    {"--tensorboard-log-interval"}));
  append(r, refused("energy consumption logging (NVML)", {"--log-energy"}));
  append(r, refused("progress.txt (tokens and FLOPs so far) in the checkpoint directory", {"--log-progress"}));
  append(r, refused("the max attention logit in the log; --tensor-metrics layer-attention-logit-max:N computes it",
                    {"--log-max-attention-logit"}));
  // Validation: Strata evaluates --eval-iters steps at the training batch sizes every --eval-interval.
  append(r, refused("evaluation batch sizes apart from training's (Strata evaluates with --micro-batch-size and "
                    "--global-batch-size)",
                    {"--eval-micro-batch-size", "--eval-global-batch-size"}));
  append(r, refused("evaluating the whole validation split each time; set --eval-iters", {"--full-validation"}));
  append(r, refused("separate validation sets with a loss each",
                    {"--multiple-validation-sets", "--validation-set-names"}));
  append(r, refused("starting evaluation only after a given iteration", {"--start-eval-at-iter"}));
  append(r, refused("evaluation without training", {"--skip-train"}));
  append(r, refused("Megatron's real-time attention tests", {"--test-mode"}));
  // Profiling: Strata's --profile writes its own Chrome trace, with NVTX ranges on CUDA.
  append(r, without_effect("NVTX range annotations (Strata's --profile emits NVTX ranges on CUDA)", {"--nvtx-ranges"}));
  append(r, without_effect("detail in PyTorch's profiler traces (tensor shapes, call stacks, Chakra); --profile "
                           "writes Strata's own trace",
                           {"--pytorch-profiler-collect-shapes", "--pytorch-profiler-collect-callstack",
                            "--pytorch-profiler-collect-chakra", "--record-shapes"}));
  return r;
}

// Optimizer, weight decay, initialisation and RNG beyond the optimizer section's fields.
static Rules optimizer_rules() {
  Rules r;
  // Weight decay, frozen parameters and initialisations Strata lacks.
  append(r, refused("weight decay on the QK-layernorm weights (Strata applies none to 1-D parameters)",
                    {"--apply-wd-to-qk-layernorm", "--no-weight-decay-cond-type"}));
  append(r, refused("freezing the model's parameters", {"--freeze-all-layers"}));
  append(r, refused("Xavier-uniform initialisation; Strata draws weights from a normal with --init-method-std",
                    {"--init-method-xavier-uniform"}));
  // Settings of optimizers Strata does not have (--optimizer is adam).
  append(r, without_effect("settings of Megatron's SGD, Lion and Muon optimizers, read only with --optimizer sgd, "
                           "lion or muon (Strata's optimizer is adam)",
                           {"--sgd-momentum", "--lion-beta1", "--lion-beta2", "--muon-momentum", "--muon-nesterov",
                            "--muon-no-split-qkv", "--muon-scale-mode", "--muon-fp32-matmul-prec",
                            "--muon-coefficient-type", "--muon-num-ns-steps", "--muon-tp-mode", "--muon-use-syrk",
                            "--muon-extra-scale-factor", "--muon-scalar-optimizer",
                            "--no-use-layer-wise-param-layout"}));
  // Transformer Engine's precision-aware Adam: only its f32 states are Strata's.
  append(r, without_effect("Transformer Engine's precision-aware Adam (with f32 states, Strata's Adam)",
                           {"--use-precision-aware-optimizer"}));
  r.push_back(accepted_values("--main-grads-dtype",
                              "the precision-aware optimizer's main gradients in f32, as Strata's (bf16 ones: "
                              "--grad-reduce-in-bf16)",
                              {"fp32"}));
  r.push_back(accepted_values("--main-params-dtype", "the precision-aware optimizer's master weights in f32, as "
                              "Strata's",
                              {"fp32"}));
  r.push_back(accepted_values("--exp-avg-dtype", "the precision-aware optimizer's first Adam moment in f32, as "
                              "Strata's",
                              {"fp32"}));
  r.push_back(accepted_values("--exp-avg-sq-dtype", "the precision-aware optimizer's second Adam moment in f32, as "
                              "Strata's",
                              {"fp32"}));
  // RNG implementations: Strata draws dropout from its own counter-based Philox streams.
  append(r, without_effect("Megatron's RNG tracker implementation (Strata's dropout draws from its own "
                           "counter-based Philox streams)",
                           {"--te-rng-tracker", "--inference-rng-tracker"}));
  return r;
}

Rules run_flag_rules() {
  Rules r;
  append(r, training_rules());
  append(r, resilience_rules());
  append(r, checkpoint_content_rules());
  append(r, checkpoint_io_rules());
  append(r, distributed_rules());
  append(r, fsdp_rules());
  append(r, data_rules());
  append(r, tokenizer_rules());
  append(r, logging_rules());
  append(r, optimizer_rules());
  return r;
}

}  // namespace strata::megatron_flags
