// Activation counts for `strata plan` (training/planning/memory_plan.h) from the layers' own
// (each layer kind's description, models/config/layer_kind.h): a run of layers under each recompute mode,
// the MTP depths (GPT and hybrid) and the stack-exit mHC contraction. (Parameters: the model manifest, models/model_manifest.h.)
// Reference: megatron/core/ssm/mamba_mixer.py, megatron/core/models/hybrid/hybrid_layer_specs.py,
// megatron/core/transformer/multi_token_prediction.py, Megatron dev transformer/hyper_connection.py.
// Details: docs/parallelism.md, "Planning a layout"; the formulas above each function.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/config/layer_kind.h"
#include "models/config/model_config.h"
#include "training/planning/memory_plan.h"

namespace strata {

// The shape of one micro-batch on one rank (ActivationShape, LayerActivations: models/config/layer_kind.h).
ActivationShape activation_shape(const ResolvedModelConfig& m, int64_t tp, int64_t etp, int64_t cp, bool sp,
                                 int64_t micro_batch_size, int64_t element_bytes);

// The stack exit's mHC state (zero without mHC): the contraction's input [T, n·C] on the last
// stage. (A layer's activations, mHC sites included: its kind's, models/config/layer_kind.h.)
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
