// Megatron-LM flags without a Strata field, model family: the transformer configuration, network
// size, MLA, MoE, mixed precision and heterogeneous architecture groups of Megatron's parser (the
// flags that map onto a model.* field by name are not here). See megatron_flag_families.h.
// Reference (Megatron-LM d98e8a6): megatron/training/arguments.py (help texts),
// megatron/core/transformer/transformer_config.py and megatron/core/model_parallel_config.py (the
// docstrings of the fields ArgumentGroupFactory turns into flags).
#include "training/config/megatron_flag_families.h"

namespace strata::megatron_flags {

namespace {
const char* const kGtp = "generalized tensor parallelism (GTP weight sharding with rematerialization)";
const char* const kOffload = "CPU offloading of activations or weights";
}  // namespace

// Attention and positions: MLA, other position encodings, attention softmax and gating.
static Rules attention_rules() {
  Rules r;
  // DeepSeek's multi-latent attention: its sizes map onto model.* by name; its implementation switches.
  append(r, without_effect("fusing MLA's down projections and input norm into one GEMM (the same math)",
                           {"--mla-down-proj-fusion"}));
  append(r, without_effect("caching MLA's latents in generation: Strata's generation always caches the latent and "
                           "the RoPE key, never the expanded keys and values",
                           {"--cache-mla-latents"}));
  // YaRN (--position-embedding-type yarn, and MLA): --rotary-scaling-factor, --yarn-*, --mscale and
  // --mscale-all-dim map by name onto model.rotary_scaling_factor, model.yarn_*, model.mscale and
  // model.mscale_all_dim (Megatron's argument_utils.py _apply_yarn_config_from_args).
  // Position encodings of other model families.
  append(r, refused("multimodal models (M-RoPE sections)", {"--mrope-section"}));
  append(r, refused("relative position embeddings (T5)",
                    {"--relative-attention-num-buckets", "--relative-attention-max-distance"}));
  // Which keys a query sees, and how its scores are normalised.
  // --window-size, --window-attn-skip-freq and --softmax-type map by name onto model.window_size,
  // model.window_attn_skip_freq and model.softmax_type (models/config/attention_config.h).
  // Changes to the attention block's math.
  append(r, refused("gated attention output (Qwen3-Next)", {"--attention-output-gate"}));
  append(r, refused("query/key L2 normalisation (Llama 4); Strata has --qk-layernorm", {"--qk-l2-norm"}));
  append(r, refused("QK-clip (MuonClip's rescaling of the query and key weights)",
                    {"--qk-clip", "--qk-clip-alpha", "--qk-clip-threshold"}));
  return r;
}

// Megatron's experimental attention layers (DSA, gated DeltaNet, Gated DeltaProduct, kitchen).
static Rules attention_variant_rules() {
  Rules r;
  // The flag that selects one of them.
  append(r, refused("experimental attention variants (gated DeltaNet, DeepSeek sparse attention)",
                    {"--experimental-attention-variant"}));
  // DeepSeek sparse attention: its indexer and loss.
  append(r, refused("DeepSeek sparse attention (DSA)",
                    {"--dsa-indexer-head-dim", "--dsa-indexer-k-norm-epsilon", "--dsa-indexer-k-norm-fp32",
                     "--dsa-indexer-loss-coeff", "--dsa-indexer-n-heads", "--dsa-indexer-rope-interleaved",
                     "--dsa-indexer-skip-topk-offset", "--dsa-indexer-topk", "--dsa-indexer-topk-freq",
                     "--dsa-indexer-use-sparse-loss", "--no-dsa-indexer-rotate-activation",
                     "--disable-dsa-indexer-rotate-activation", "--no-dsa-indexer-scoring-relu",
                     "--disable-dsa-indexer-scoring-relu"}));
  append(r, without_effect("the fused kernel backend of DeepSeek sparse attention (a layer Strata refuses)",
                           {"--dsa-kernel-backend"}));
  // Gated DeltaNet linear-attention layers and their sizes.
  append(r, refused("gated DeltaNet linear attention",
                    {"--linear-attention-freq", "--linear-conv-kernel-dim", "--linear-key-head-dim",
                     "--linear-num-key-heads", "--linear-num-value-heads", "--linear-value-head-dim"}));
  // Gated DeltaProduct mixers: the model parameter, then its kernel and recompute knobs.
  append(r, refused("Gated DeltaProduct layers", {"--gdp-num-householder"}));
  append(r, without_effect("the CuTeDSL kernel of Gated DeltaProduct layers (which Strata refuses)",
                           {"--gdp-cutedsl-kernel"}));
  append(r, without_effect("chunk-state recompute of the Gated DeltaProduct kernel (memory; a layer Strata refuses)",
                           {"--gdp-num-chunk-states-to-recompute"}));
  // The kitchen quantization extension's attention, and its kernel when on.
  append(r, refused("the kitchen quantization extension's attention", {"--use-kitchen-attention"}));
  append(r, without_effect("the kitchen attention kernel (only with --use-kitchen-attention, which Strata refuses)",
                           {"--kitchen-attention-backend"}));
  return r;
}

// Activations, parameterisation and initialisation, model types, hybrid and MTP settings.
static Rules architecture_rules() {
  Rules r;
  // gpt-oss's and Nemotron's MLP activations (--quick-geglu, --glu-linear-offset,
  // --activation-func-clamp-value, --squared-relu, --use-fused-weighted-squared-relu) map by name
  // onto model.* (models/config/activation_config.h).
  // Maximal Update Parameterization; multipliers of 1 are no scaling, as Strata.
  append(r, refused("Maximal Update Parameterization (MuP)",
                    {"--use-mup", "--mup-attn-scale-power", "--mup-base-head-dim", "--mup-base-hidden-size"}));
  r.push_back(
      accepted_values("--mup-embedding-mult", "no MuP embedding multiplier (MuP is not supported)", {"1.0", "1"}));
  r.push_back(accepted_values("--mup-output-mult", "no MuP logit multiplier (MuP is not supported)", {"1.0", "1"}));
  r.push_back(accepted_values("--mup-width-mult", "no MuP width scaling (MuP is not supported)", {"1.0", "1"}));
  // Initialisation: a separate embedding std changes the init and exempts the embedding from decay.
  append(r, refused("a separate init std for the embedding (which also exempts it from weight decay); Strata "
                    "initialises it with --init-method-std",
                    {"--embedding-init-method-std"}));
  append(r, without_effect("skipping weight initialisation before a checkpoint load (Strata initialises, then loads)",
                           {"--no-initialization"}));
  append(r, without_effect("building the model on PyTorch's meta device (Megatron-FSDP only)",
                           {"--init-model-with-meta-device"}));
  // Per-layer architectures and other model families.
  append(r, refused("heterogeneous layer configurations",
                    {"--heterogeneous-layers-config-path", "--heterogeneous-layers-config-encoded-json"}));
  append(r, refused("BERT models", {"--bert-no-binary-head"}));
  append(r, refused("encoder-decoder (T5) models; a GPT's depth is --num-layers",
                    {"--encoder-num-layers", "--decoder-num-layers"}));
  // Hybrid models and multi-token prediction.
  // --is-hybrid-model maps by name onto model.is_hybrid_model (Megatron's hybrid init).
  append(r, refused("a separate MTP layer pattern; write the MTP depths after '/' in --hybrid-layer-pattern",
                    {"--mtp-hybrid-override-pattern"}));
  append(r, refused("MTP hidden-state mixing (HSM)", {"--mtp-hsm"}));
  append(r, without_effect("MTP in its own virtual pipeline stage (derived from Megatron's pipeline layout; Strata "
                           "runs MTP on the last stage)",
                           {"--mtp-standalone"}));
  // Tooling outside the computation.
  append(r, without_effect("workarounds for the Torch ONNX exporter", {"--onnx-safe"}));
  append(r, without_effect("dumping Megatron's entry-point configs (Strata: --print-config)", {"--config-logger-dir"}));
  return r;
}

// MoE: routing variants Strata lacks, and the flex dispatcher's and grouped GEMM's implementations.
static Rules moe_rules() {
  Rules r;
  // Routing and expert variants that change what the layer computes.
  append(r, refused("MoE routing replay", {"--moe-enable-routing-replay"}));
  append(r, refused("random expert bias on the router logits (benchmarking); Strata has "
                    "--moe-router-force-load-balancing",
                    {"--moe-router-force-biased"}));
  append(r, refused("quantile-balancing routing", {"--moe-router-quantile-balancing-ema"}));
  append(r, refused("MoE upcycling of a dense checkpoint", {"--moe-use-upcycling", "--moe-upcycling-granularity"}));
  append(r, refused("block-interleaved GLU weights (Strata stores the gate and linear halves apart)",
                    {"--moe-mlp-glu-interleave-size", "--moe-shared-expert-glu-interleave-size"}));
  append(r, refused("a per-rank token budget of the flex dispatcher (HybridEP drops the tokens over it)",
                    {"--moe-expert-rank-capacity-factor"}));
  // The flex dispatcher's backends and SM budgets (--moe-token-dispatcher-type flex runs with the
  // all-to-all dispatcher's numerics).
  append(r, without_effect("the flex token dispatcher's communication kernels (DeepEP, HybridEP, NCCL EP)",
                           {"--moe-enable-deepep", "--moe-flex-dispatcher-backend", "--moe-flex-dispatcher-num-sms",
                            "--moe-deepep-num-sms", "--moe-hybridep-num-sms", "--moe-hybridep-num-sms-preprocessing",
                            "--moe-hybridep-num-blocks-permute", "--moe-hybridep-num-blocks-unpermute",
                            "--moe-hybridep-pad-uneven-dispatch-inputs", "--moe-ncclep-zero-copy",
                            "--moe-permute-fusion-into-hybridep"}));
  // Wire dtype of the dispatched tokens: unquantized is what Strata sends.
  r.push_back(accepted_values("--moe-dispatch-fwd-dtype",
                              "unquantized dispatched tokens (MXFP8 dispatch is not supported)", {"bf16"}));
  r.push_back(accepted_values("--moe-combine-bwd-dtype",
                              "unquantized combine gradients (MXFP8 combine is not supported)", {"bf16"}));
  // Fused kernels and weight storage of the router and experts.
  append(r,
         without_effect("fused MoE permutation and router kernels", {"--moe-permute-fusion", "--moe-router-fusion"}));
  append(r, without_effect("Transformer Engine's grouped-tensor storage and GEMMs of the expert weights",
                           {"--moe-use-grouped-tensor", "--moe-single-grouped-weight", "--moe-single-grouped-bias"}));
  append(r, without_effect("Transformer Engine's grouped GEMM for a dense or shared-expert MLP",
                           {"--use-grouped-gemm-for-dense-mlp", "--use-grouped-gemm-for-shared-expert"}));
  // Padding each expert's rows to a multiple of 16/32 for FP8/FP4 GEMMs: padded rows carry weight 0.
  append(r, without_effect("padding the routing map for quantized expert GEMMs (the padded rows carry weight 0)",
                           {"--moe-router-padding-for-fp8", "--moe-router-padding-for-quantization"}));
  // Paged stashing of the experts' activations for backward (memory management).
  append(r, without_effect("paged stashing of the routed experts' activations (memory only)",
                           {"--moe-paged-stash", "--moe-paged-stash-buffer-size-factor-cpu",
                            "--moe-paged-stash-buffer-size-factor-cuda", "--moe-paged-stash-page-size"}));
  // Overlapping the shared experts and expert-parallel communication with compute.
  append(r, without_effect("overlapping MoE communication with computation",
                           {"--moe-shared-expert-overlap", "--overlap-moe-expert-parallel-comm",
                            "--overlap-dispatch-backward-with-experts-wgrad", "--ep-overlap-early-attn-memory-release",
                            "--high-priority-a2a-comm-stream"}));
  return r;
}

// Precision: FP8-only refinements, 16-bit cross entropy and logits, GEMM reductions, SSM states.
static Rules precision_rules() {
  Rules r;
  // Refinements that apply only under FP8 (--fp8-* is refused): every layer already runs in the
  // model's precision.
  append(r,
         without_effect("BF16 first and last layers under FP8 (Strata has no FP8)",
                        {"--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16"}));
  append(r, without_effect("higher-precision weight gradients under FP8 (Strata has no FP8)",
                           {"--no-fp8-wgrad", "--disable-fp8-wgrad"}));
  append(r, without_effect("reusing the gradient buffer for MXFP8 parameter all-gathers (Strata has no FP8)",
                           {"--reuse-grad-buf-for-mxfp8-param-ag"}));
  append(r, refused("per-module precision overrides (Transformer Engine's precision config file)",
                    {"--te-precision-config-file"}));
  // Megatron-Core's GPT and hybrid models store this flag and never read it (BERT/T5/legacy only).
  append(r, without_effect("the fp16 cross entropy of Megatron's BERT, T5 and legacy models (Megatron-Core's GPT and "
                           "hybrid models do not apply it)",
                           {"--fp16-lm-cross-entropy"}));
  append(r, refused("logits in a dtype other than the model's (Strata computes them in the model's dtype, "
                    "Megatron's default)",
                    {"--output-logit-dtype"}));
  // --disable-bf16-reduced-precision-matmul maps by name onto training.disable_bf16_reduced_precision_matmul.
  r.push_back(accepted_values("--mamba-training-ssm-states-dtype",
                              "the Mamba inter-chunk SSM states in fp32, as Strata's SSD scan keeps them", {"fp32"}));
  // Batch-invariant kernels, and their GEMM backend when on.
  append(r, refused("batch-invariant kernels (results independent of the batch size)", {"--batch-invariant-mode"}));
  append(r, without_effect("the GEMM backend of batch-invariant mode (only with --batch-invariant-mode, which Strata "
                           "refuses)",
                           {"--batch-invariant-backend"}));
  return r;
}

// Parallel layouts Strata lacks, and communication choices that change no numbers.
static Rules parallelism_rules() {
  Rules r;
  // Pipeline split counting the embedding or loss as a layer: a layout Strata does not build.
  append(r, refused("counting the embedding or the loss as a layer in the pipeline split; set "
                    "--num-layers-in-first-pipeline-stage / --num-layers-in-last-pipeline-stage",
                    {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"}));
  append(r, without_effect("the micro-batch grouping of the interleaved pipeline schedule (Strata groups pp "
                           "micro-batches, Megatron's default)",
                           {"--microbatch-group-size-per-virtual-pipeline-stage"}));
  // Weight sharding over extra ranks, and load-balanced packed sequences over DP x CP.
  append(r, refused(kGtp, {"--tensor-parallel-num-weight-shards", "--expert-tensor-parallel-num-weight-shards",
                           "--gtp-remat-opt-in-modules"}));
  append(r, refused("hybrid context parallelism (packed sequences balanced over the DP x CP ranks)",
                    {"--hybrid-context-parallel", "--max-seqlen-per-dp-cp-rank"}));
  // Transformer Engine's userbuffer overlap of TP communication with GEMMs.
  append(r, without_effect("Transformer Engine's TP communication overlap",
                           {"--no-tp-comm-bulk-dgrad", "--disable-tp-comm-bulk-dgrad", "--no-tp-comm-bulk-wgrad",
                            "--disable-tp-comm-bulk-wgrad", "--no-tp-comm-overlap-ag", "--disable-tp-comm-overlap-ag",
                            "--no-tp-comm-overlap-rs", "--disable-tp-comm-overlap-rs", "--no-tp-comm-split-ag",
                            "--disable-tp-comm-split-ag", "--no-tp-comm-split-rs", "--disable-tp-comm-split-rs",
                            "--tp-comm-overlap-rs-dgrad", "--tp-comm-bootstrap-backend"}));
  // Scheduling of weight-gradient GEMMs and pipeline send/recv.
  append(r, without_effect("deferring weight-gradient GEMMs to overlap communication",
                           {"--delay-wgrad-compute", "--defer-embedding-wgrad-compute", "--wgrad-deferral-limit"}));
  append(r, without_effect("Megatron's pipeline send/recv implementation",
                           {"--overlap-p2p-communication-warmup-flush", "--use-ring-exchange-p2p",
                            "--pipeline-model-parallel-comm-backend"}));
  append(r, without_effect("symmetric-memory all-reduce kernels",
                           {"--symmetric-ar-type", "--nccl-all-reduce-for-prefill"}));
  return r;
}

// Memory: activation offloading and its tuning, the embedding's scatter output.
static Rules memory_rules() {
  Rules r;
  // Switching offloading on: Strata keeps activations and weights on the device.
  r.push_back(accepted_values("--cpu-offloading-num-layers",
                              "no layers offloaded (CPU offloading of activations or weights is not supported)",
                              {"0"}));
  append(r, refused(kOffload, {"--fine-grained-activation-offloading", "--offload-modules"}));
  // Tuning knobs that act only once offloading is on.
  append(r, without_effect("tuning of Megatron's activation offloading (Strata offloads nothing)",
                           {"--activation-offload-fraction", "--min-offloaded-tensor-size",
                            "--delta-offload-bytes-across-pp-ranks", "--fine-grained-offloading-max-inflight-offloads",
                            "--cpu-offloading-retain-pinned-cpu-buffers", "--delay-offload-until-cuda-graph"}));
  append(r, without_effect("not cloning the embedding's sequence-parallel scatter output (memory only)",
                           {"--no-clone-scatter-output-in-embedding", "--disable-clone-scatter-output-in-embedding"}));
  append(r, without_effect("splitting the MLP along the sequence into chunks (memory only)",
                           {"--mlp-chunks-for-training", "--mlp-chunks-for-prefill"}));
  return r;
}

// Kernels: Transformer Engine choices, CUDA graphs, attention and inference kernels.
static Rules kernel_rules() {
  Rules r;
  // Transformer Engine's implementations of the same math.
  append(r,
         without_effect("Transformer Engine's fused kernels and operation fuser",
                        {"--use-te-activation-func", "--use-transformer-engine-op-fuser", "--fused-residual-rmsnorm"}));
  append(r, without_effect("Megatron's cross-entropy kernel (native or Transformer Engine's)",
                           {"--cross-entropy-fusion-impl"}));
  append(r, without_effect("the unfused Mamba mixer path instead of the memory-efficient fused kernel",
                           {"--disable-mamba-mem-eff-path"}));
  // CUDA graph capture of the step or its layers.
  append(r, without_effect("CUDA graphs", {"--cuda-graph-impl", "--cuda-graph-warmup-steps", "--enable-cuda-graph",
                                           "--external-cuda-graph", "--inference-cuda-graph-scope",
                                           "--moe-pad-experts-for-cuda-graph-inference"}));
  // Attention kernels (Strata runs its own).
  append(r, without_effect("the FlashAttention generation and decode kernels",
                           {"--flash-attention-version", "--flash-decode"}));
  // Megatron's inference engine kernels.
  append(r, without_effect("Megatron's inference kernels",
                           {"--inference-disable-triton-nvls-kernels", "--inference-fuse-tp-communication",
                            "--inference-grouped-gemm-backend", "--inference-moe-disable-fused-quant-kernels",
                            "--inference-moe-token-dispatcher-type"}));
  return r;
}

Rules model_flag_rules() {
  Rules r;
  append(r, attention_rules());
  append(r, attention_variant_rules());
  append(r, architecture_rules());
  append(r, moe_rules());
  append(r, precision_rules());
  append(r, parallelism_rules());
  append(r, memory_rules());
  append(r, kernel_rules());
  return r;
}

}  // namespace strata::megatron_flags
