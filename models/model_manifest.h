// The resolved description of a built model, derived from its resolved config: the layers in
// order (decoder, then the MTP depths' inner layers), the observation sites each emits
// (core/observe.h), the named losses and the parameters, so that the tensor dumper, the metric
// checks, the loss channel and the planner read the model from one place.
// tests/unit/test_model_manifest.cpp checks a real forward and backward of every model family
// emits exactly these sites; test_manifest_parameters.cpp that every rank of every layout builds
// exactly these parameters.
// Reference: megatron/core/tensor_observation.py (owners and names), transformer_block.py,
// models/hybrid/hybrid_block.py, transformer/multi_token_prediction.py (module paths).
// Details (every site kind, shapes and dims): docs/observation.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/observe.h"
#include "core/shape.h"
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

// One parameter: its canonical name (core/parameter.h) and global shape (the vocabulary rows padded
// at the layout's tp), how tensor and expert parallelism split it, and where it is built.
struct ManifestParameter {
  std::string name;
  Shape shape;
  bool tensor_parallel = false;  // split over tp when tp > 1 (an expert's weight: over the expert tp group)
  int64_t expert = -1;           // an expert's weight: its global id; the ep rank holding it builds it
  bool f32 = false;              // kept in f32 whatever the compute dtype (mHC, Mamba's A_log and D)
  bool shared_copy = false;      // a last-stage copy of the word embeddings (Parameter::shared_copy)
  int64_t layer = -1;            // index into ModelManifest::layers; -1: embedding, stack exit, MTP module
  int64_t stage = 0, chunk = 0;  // the pipeline stage and model chunk that build it
  // The elements one rank holds: the shard when split over tp (experts: etp) ranks.
  int64_t local_elements(int64_t tp, int64_t etp) const;
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
  // Every parameter, each once (with a pipeline layout: each shared copy too, on its stage): each
  // layer's, then the embedding, stack exit and MTP modules' own. Empty while model.vocab_size is
  // unset (the tokenizer not yet resolved).
  std::vector<ManifestParameter> parameters;
};

// The manifest of a resolved model section. Sites per layer
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
// Parameters at tp = 1, on one stage.
ModelManifest build_model_manifest(const ResolvedModelConfig& m);
// The same with each layer's stage and chunk under `parallel` (validated, the hybrid pattern's `|`
// segments applied): parallel/pipeline_layout.h's split, or the hybrid segments; the MTP layers on
// the last stage's last chunk, with the output layer. Parameters: the vocabulary padded at the
// layout's tp; the embedding on stage 0's first chunk, the stack exit and MTP modules with the
// output layer; with pp > 1 the last stage also builds a copy of the word embeddings when they are
// tied to the output layer, or (untied) for the MTP depths' lookups.
ModelManifest build_model_manifest(const ResolvedModelConfig& m, const ParallelConfig& parallel);

// The module path of MTP module k's inner layer (0-based k), Megatron's MultiTokenPredictionLayer
// submodule: "mtp.layers.<k>.mtp_model_layer" (GPT: the layer itself; hybrid: a stack whose layers
// are "….mtp_model_layer.layers.<j>").
std::string mtp_model_layer_path(int64_t k);

// The loss of MTP depth k (1-based): "mtp_<k> loss" (Megatron's process_mtp_loss names).
std::string mtp_loss_name(int64_t depth);

}  // namespace strata
