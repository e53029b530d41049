// Per-layer-kind activation counts for `strata plan` (training/planning/memory_plan.h): the bytes
// one micro-batch saves, for each symbol of a hybrid pattern (M Mamba2, * attention only, - MLP
// only, E MoE only), for the MTP depths (GPT and hybrid) and for mHC hyper-connections (per site,
// and the stack-exit contraction). (Parameters: the model manifest, models/model_manifest.h.)
// Reference: megatron/core/ssm/mamba_mixer.py, megatron/core/models/hybrid/hybrid_layer_specs.py,
// megatron/core/transformer/multi_token_prediction.py, Megatron dev transformer/hyper_connection.py.
// Details: docs/parallelism.md, "Planning a layout"; the formulas above each function.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "training/planning/memory_plan.h"

namespace strata {

// The activation bytes of one layer for one micro-batch on one rank.
struct LayerActivations {
  int64_t full = 0;              // everything its backward reads
  int64_t input = 0;             // full recompute: its input only
  int64_t selective_saving = 0;  // selective mlp / moe: the MLP slot's activations no longer kept
  int64_t backward = 0;          // its backward's own buffers on top (M: the in_proj, conv and gate
                                 // gradients), what a replayed layer peaks at besides `full`
  // Selective mhc recompute: per site the input [T, n·C] and the aggregation [T, C] its pre-norm
  // keeps are dropped; a group's first layer keeps its input (mhc_input).
  int64_t mhc_dropped = 0, mhc_input = 0;
};
// The shape of one micro-batch on one rank.
struct ActivationShape {
  int64_t tokens = 0;  // s·b with s = seq_length / cp
  int64_t tp = 1, etp = 1, e = 2;
  bool sp = false;
};
ActivationShape activation_shape(const ResolvedModelConfig& m, int64_t tp, int64_t etp, int64_t cp, bool sp,
                                 int64_t micro_batch_size, int64_t element_bytes);

// A hybrid layer of `symbol`, with its mHC site when enabled: what its Saved struct holds (T tokens,
// e bytes per element, /t for tp-split tensors and, under sp, the sequence-sharded ones (sp)):
//   M  norm and in_proj inputs e·T·C each (sp), conv input and output 2e·T·conv_dim, gate, scan
//      output and out_proj input 3e·T·d_inner, dt before and after softplus 2e·T·H (/t);
//   *  norm and qkv inputs e·T·C each (sp); q, k, v, attention output e·T·d·(2a + 2g) and the f32
//      log-sum-exp 4·T·a (/t);
//   -  norm and fc1 inputs e·T·C each (sp); fc1 and activation outputs e·T·ffn·(3 SwiGLU, 2) (/t);
//   E  norm and router inputs e·T·C (sp), f32 router scores 8·T·E, the routed experts' input, fc1
//      and activation outputs e·T·topk·(C + moe_ffn·(3, 2)) (/etp), the shared expert's like -.
LayerActivations hybrid_layer_activations(const ResolvedModelConfig& m, char symbol, const ActivationShape& a);
// A GPT layer from activation_sizes' formula, with its two mHC sites when enabled.
LayerActivations gpt_layer_activations(const ResolvedModelConfig& m, const ActivationSizes& s, const ActivationShape& a);
// One mHC site's saved state (zero without mHC), and the stack exit's (the contraction's input
// [T, n·C] on the last stage). A site: the input x [T, n·C] and the merge's y [T, C] (e), the f32
// mappings proj [T, n²+2n], rinv [T], h_pre / h_post [T, n], the H_res logits and H_res [T, n, n];
// a layer's input (what full recompute keeps) is n·C wide.
int64_t mhc_site_activations(const ResolvedModelConfig& m, const ActivationShape& a);
int64_t mhc_head_activations(const ResolvedModelConfig& m, const ActivationShape& a);

// `in_flight` units of `layers` under the config's recompute mode (uniform: chunks of
// recompute_num_layers inputs plus the largest chunk replayed; block: the first recompute_num_layers
// keep their inputs; selective: every layer's saving dropped, plus the largest replayed).
int64_t configured_layer_activations(const ResolvedModelConfig& m, const std::vector<LayerActivations>& layers,
                                     int64_t in_flight);
// Selective mhc recompute: what the mhc_recompute_layer_num groups of a model chunk free (0 without).
int64_t mhc_recompute_saving(const ResolvedModelConfig& m, const std::vector<LayerActivations>& layers, int64_t in_flight);
// Of those, what the replayed layer (or chunk) adds at the peak over what the backward holds before
// it (0 without a replay): what the MTP depths' backward overlaps with (they are freed before the
// decoder replays).
// full: the config's mode when false, full recompute (uniform 1) when true.
int64_t replay_layer_activations(const ModelConfig& m, const std::vector<LayerActivations>& layers, bool full);
// No recompute, and full recompute (every input plus the largest layer replayed).
int64_t plain_layer_activations(const std::vector<LayerActivations>& layers, int64_t in_flight);
int64_t full_recompute_layer_activations(const std::vector<LayerActivations>& layers, int64_t in_flight);

// The MTP depths of the last stage for one micro-batch (per depth the embedding, h^(k−1), the
// eh_proj input [T, 2C], the final-norm input and the inner layers): inner: one depth's inner
// layers; head: one output head (input and f32 logits). recompute: 0 none, 1 full (each depth
// keeps its two inputs, plus one depth replayed), 2 the config's mode (full uniform checkpoints the
// depths, block does not, selective drops the inner layers' savings). kept: held through the
// depths' backward; replay: one depth (or inner layer) replayed on top — all freed before the
// decoder's replay, so a stage adds max(0, kept + replay − the decoder's replay).
struct MtpActivations {
  int64_t kept = 0, replay = 0;
};
MtpActivations mtp_activations(const ResolvedModelConfig& m, const std::vector<LayerActivations>& inner, int64_t head,
                               const ActivationShape& a, int recompute);

}  // namespace strata
