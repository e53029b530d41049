// The resolved description of a built model, derived from its finalized config: the layers in
// order (decoder, then the MTP depths' inner layers) and the observation sites each emits
// (core/observe.h), so that the tensor dumper and the metric checks read the model's sites from
// one place. tests/unit/test_model_manifest.cpp checks a real forward and backward of every model
// family emits exactly these sites.
// Reference: megatron/core/tensor_observation.py (owners and names), transformer_block.py,
// models/hybrid/hybrid_block.py, transformer/multi_token_prediction.py (module paths).
// Details (every site kind, shapes and dims): docs/observation.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/observe.h"
#include "models/model_config.h"
#include "parallel/parallel_config.h"

namespace strata {

// One observation site: the owner module, the name local to it, and its source kind.
struct ObservationSite {
  std::string owner, name;
  SourceKind kind;
  int64_t per_forward = 1;  // emissions per forward: mtp_num_layers for a repeated MTP layer's sites
  std::string path() const { return owner + "." + name; }  // what tensor_dump_sites patterns match
};

// One layer: its module path, its symbol (a hybrid pattern symbol; 'T' for a GPT transformer
// layer), its global layer number (MTP inner layers continue after the decoder's) and whether it
// belongs to an MTP depth; with a pipeline layout, the stage (pipeline rank) and model chunk
// (virtual stage) that build it.
struct ManifestLayer {
  std::string name;
  char symbol;
  int64_t number;
  bool mtp;
  int64_t stage = 0, chunk = 0;
};

// The decoder layers of one model chunk: global numbers [first, first + count).
struct ChunkLayers {
  int64_t first = 0, count = 0;
};

struct ModelManifest {
  std::vector<ManifestLayer> layers;
  // With a pipeline layout: [stage][chunk] → its decoder layers (what each rank's chunks build).
  std::vector<std::vector<ChunkLayers>> chunks;
  std::vector<ObservationSite> sites;  // in layer order, then the output layer's
  // The named losses, as the log line, JSONL, TensorBoard and the golden values show them:
  // "lm loss", the MTP depths' "mtp_<k> loss", then the MoE router losses.
  std::vector<std::string> losses;
};

// The manifest of a finalized model config (finalize_model_config has run). Sites per layer
// (owner "decoder.layers.N" or an MTP inner layer's module path):
//   every layer          residual_accumulator, residual_contribution
//   attention (GPT, `*`) <attention owner>.self_attention.attention_logit_max
//   MoE (GPT MoE, `E`)   <mlp owner>.mlp.router.{router_input, router_logits, router_scores,
//                        router_topk_probs, router_diagnostics, router_top_indices, router_top_kept,
//                        router_diagnostic_sums}
//   mHC                  <hc owner>.{mhc_h_pre, mhc_h_post, mhc_h_res, mhc_sinkhorn_residual,
//                        mhc_layer_input, mhc_layer_output} — GPT: self_attention_hyper_connection
//                        and mlp_hyper_connection; hybrid: hyper_connection (layer under inner_layer)
// and once per model: output_layer.output_logits and output_layer.mtp_logits.<k>, k = 0..D−1
// (Megatron's process_mtp_loss numbers the MTP logit sites from 0; the losses stay mtp_1 .. mtp_D).
ModelManifest build_model_manifest(const ModelConfig& m);
// The same with each layer's stage and chunk under `parallel` (validated, the hybrid pattern's `|`
// segments applied): parallel/pipeline_layout.h's split, or the hybrid segments; the MTP layers on
// the last stage's last chunk, with the output layer.
ModelManifest build_model_manifest(const ModelConfig& m, const ParallelConfig& parallel);

// The module path of MTP module k's inner layer (0-based k), Megatron's MultiTokenPredictionLayer
// submodule: "mtp.layers.<k>.mtp_model_layer" (GPT: the layer itself; hybrid: a stack whose layers
// are "….mtp_model_layer.layers.<j>").
std::string mtp_model_layer_path(int64_t k);

// The loss of MTP depth k (1-based): "mtp_<k> loss" (Megatron's process_mtp_loss names).
std::string mtp_loss_name(int64_t depth);

}  // namespace strata
