// Layout planning without running (`strata plan`, apps/strata/cmd_plan.cpp): the layers of each
// pipeline stage and virtual chunk, the parameters one rank holds, a memory estimate per rank and
// the pipeline bubble. Pure arithmetic on a validated config: nothing is allocated.
// Reference: megatron/training/theoretical_memory_usage.py, megatron/core/transformer/
// transformer_block.py (get_num_layers_to_build, get_transformer_layer_offset), megatron/core/
// pipeline_parallel/schedules.py (warmup micro-batches), Narayanan et al. 2021 (bubble),
// Korthikanti et al. 2022 (activations). The parameters come from the model manifest
// (models/model_manifest.h); activation formulas: docs/parallelism.md, "Planning a layout"; hybrid,
// MTP and mHC layers per kind: training/planning/layer_plan.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/config/model_config.h"
#include "models/model_manifest.h"
#include "parallel/parallel_config.h"
#include "training/config/config.h"

namespace strata {

// Parameters one rank holds, split by how tensor and expert parallelism treat them.
struct ParameterCount {
  int64_t sharded = 0;     // this tp rank's shard of tensors split over tp
  int64_t replicated = 0;  // tensors every tp rank holds whole
  int64_t expert = 0;      // MoE experts: this rank's E/ep experts, each split over etp
  int64_t f32 = 0;         // of all these, the ones kept in f32 whatever the compute dtype (Mamba's
                           // A_log and D, the mHC parameters)
  int64_t dense() const { return sharded + replicated; }  // what dp × cp shares (distributed optimizer)
  int64_t total() const { return sharded + replicated + expert; }
  ParameterCount& operator+=(const ParameterCount& o) {
    sharded += o.sharded;
    replicated += o.replicated;
    expert += o.expert;
    f32 += o.f32;
    return *this;
  }
};
ParameterCount operator*(int64_t n, const ParameterCount& c);

// The parameters one rank of pipeline stage `stage` holds, from the model manifest
// (models/model_manifest.h, built under the layout): its chunks' layers, the embedding on the first
// stage, the stack exit, MTP modules and word-embedding copies on the last; tp-split tensors as one
// tp shard, this ep rank's E/ep experts as one etp shard.
ParameterCount stage_parameter_count(const ModelManifest& manifest, int64_t stage, int64_t tp, int64_t etp,
                                     int64_t ep);

// The whole model's parameter count on one rank (tp = pp = ep = 1): what a single-process model
// allocates (model.vocab_size set).
int64_t model_parameter_total(const ResolvedModelConfig& m);

// Layers of one model chunk: global layer indices [first, first + count).
struct LayerRange {
  int64_t first = 0, count = 0;
};

// Activation bytes of one transformer layer for one micro-batch on one rank (Korthikanti et al.
// 2022, eq. 1–4, with fused attention keeping the f32 log-sum-exp instead of the s×s scores):
//   sbh·((4e + 2)/(sp ? t : 1) + 12e/t) + 4·a·s·b/t   (34·sbh + 4asb for e = 2, /t with sp);
// full recompute keeps e·sbh (/t with sp) per layer; the last stage adds 4·s·b·(h + v)/t.
// An MoE layer uses the dense formula (its expert activations depend on the routing).
struct ActivationSizes {
  int64_t per_layer = 0;            // everything a layer's backward reads
  int64_t per_layer_recompute = 0;  // full recompute: the layer input only
  int64_t output_layer = 0;         // last stage: output-layer input + f32 logits
  // Selective recompute of the MLP (recompute_modules mlp / moe): what a layer no longer keeps,
  // the MLP's fc1 and activation outputs e·s·b·ffn·(2, 3 gated)/t (its input stays).
  int64_t per_layer_mlp_recompute_saving = 0;
  // Selective moe_act: the routed experts' activation and fc2 input no longer kept, e·(s·b/t)·topk·
  // moe_ffn·(2, 1 with the probabilities applied on the input or in the fused weighted squared
  // ReLU), averaged over the layers (only MoE layers have it).
  int64_t per_layer_moe_act_recompute_saving = 0;
};
// e: activation element bytes (2 for bf16, 4 for f32); s = seq_length/cp; b = micro_batch_size.
ActivationSizes activation_sizes(const ResolvedModelConfig& m, int64_t tp, int64_t cp, bool sequence_parallel,
                                 int64_t micro_batch_size, int64_t element_bytes, int64_t padded_vocab);

// Activations of `in_flight` units of `layers` layers under the config's recompute mode.
int64_t configured_activations(const ResolvedModelConfig& m, const ActivationSizes& a, int64_t in_flight, int64_t layers);

// Micro-batches (1F1B) or model chunks (interleaved) whose activations stage `stage` holds at its
// peak: 1F1B min(m, pp − i); interleaved min(m·vpp, 2(pp − i − 1) + (vpp − 1)·pp + 1) (Megatron's
// warmup + 1).
int64_t in_flight_micro_batches(int64_t stage, int64_t pp, int64_t vpp, int64_t num_micro_batches);

// Bytes on one rank.
struct MemoryEstimate {
  int64_t weights = 0;      // parameters at the compute dtype (the f32 ones at 4 bytes)
  int64_t main_params = 0;  // f32 master copy (bf16 only); distributed optimizer: dense /dp·cp, experts /expert dp
  int64_t grads = 0;        // f32 main grads
  int64_t optimizer = 0;    // Adam m and v, f32; sharded like main_params
  int64_t activations = 0;            // in-flight micro-batches, no recompute
  int64_t activations_recompute = 0;  // in-flight micro-batches, full recompute
  // In-flight micro-batches under the config's own recompute mode (model.recompute_*): full
  // uniform keeps one input per chunk of recompute_num_layers layers plus one chunk's activations
  // while it is replayed; block keeps inputs of its first recompute_num_layers layers; selective
  // mlp/moe drops the MLP's inner activations of every layer, plus one layer's while replayed.
  int64_t activations_configured = 0;
  int64_t static_bytes() const { return weights + main_params + grads + optimizer; }
  int64_t total() const { return static_bytes() + activations; }
  int64_t total_recompute() const { return static_bytes() + activations_recompute; }
};

struct StagePlan {
  int64_t stage = 0;
  std::vector<LayerRange> chunks;  // one per virtual stage (one without interleaving)
  bool has_embedding = false, has_output_layer = false;
  ParameterCount parameters;       // on each rank of this stage
  int64_t in_flight = 0;           // micro-batches (or model chunks with vpp) held at the peak
  int64_t moe_layers = 0;          // of its layers, MoE ones
  int64_t all_to_all_bytes_per_step = 0;  // MoE token exchange sent by one rank per step
  MemoryEstimate memory;
};

struct LayoutPlan {
  int64_t world_size = 0, tp = 1, cp = 1, ep = 1, etp = 1, dp = 1, pp = 1, vpp = 1;
  bool sequence_parallel = false, distributed_optimizer = false, bf16 = false;
  int64_t num_micro_batches = 1, micro_batch_size = 1, global_batch_size = 1;
  int64_t model_parameters = 0;  // the unsharded model (tp = pp = 1)
  // MoE (num_experts set): experts, local experts per rank, expert-data-parallel size (world /
  // (etp·ep·pp), the distributed optimizer's shards of expert state) and the bytes one rank sends
  // per MoE layer and micro-batch (training/planning/moe_plan.h).
  int64_t num_experts = 0, topk = 0, local_experts = 0, expert_dp = 1;
  int64_t all_to_all_bytes_per_layer = 0;
  int64_t padded_vocab = 0;      // at this tp
  ActivationSizes activations;
  // Hybrid models: each layer symbol of the pattern (first-use order) and one such layer's
  // activations per micro-batch, without and with full recompute (training/planning/layer_plan.h).
  struct LayerKind {
    char symbol = 0;
    int64_t per_layer = 0, per_layer_recompute = 0;
  };
  std::vector<LayerKind> hybrid_layer_kinds;
  // Generation: the cache bytes per token of the whole model's decoder layers at the compute dtype
  // (each layer kind's LayerKind::cache_bytes_per_token: attention k and v, MLA's latent and RoPE key).
  int64_t generation_cache_bytes_per_token = 0;
  std::string recompute = "none";  // the config's recompute mode (recompute_mode_text)
  double bubble_fraction = 0;
  std::vector<StagePlan> stages;
  // The stage with the largest total (ties: the first): what a rank must fit.
  const StagePlan& peak_stage(bool recompute) const;
};

// From a validated config whose model.vocab_size is set (the tokenizer's when it was null).
LayoutPlan plan_layout(const ResolvedConfig& cfg);

}  // namespace strata
