// The resolved description of a built model, derived from its resolved config: the layers in
// order (decoder, then the MTP depths' inner layers), the observation sites each emits
// (core/observe.h), the named losses and the parameters, so that the tensor dumper, the metric
// checks, the loss channel and the planner read the model from one place. Each layer's sites,
// losses and activations are its layer kind's own description (models/config/layer_kind.h) of the
// stacks the model builds (models/config/model_stacks.h); the manifest adds the output layer's
// sites. The parameters are not described: they are read from the model itself, each chunk built
// on the meta device (models/manifest_parameters.h), so there is no second list of them.
// tests/unit/test_model_manifest.cpp checks a real forward and backward of every model family
// emits exactly these sites and builds exactly these parameters; tests/mpi/test_manifest_layouts.cpp
// that every rank of every layout does.
// Reference: megatron/core/tensor_observation.py (owners and names), transformer_block.py,
// models/hybrid/hybrid_block.py, transformer/multi_token_prediction.py (module paths).
// Details (every site kind, shapes and dims): docs/observation.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "models/config/layer_kind.h"
#include "models/config/model_config.h"
#include "models/config/model_stacks.h"
#include "parallel/parallel_config.h"

namespace strata {

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

// One parameter as the model builds it (core/parameter.h): its canonical name and global shape (the
// vocabulary rows padded at the layout's tp), how tensor and expert parallelism split it, and where
// it is built.
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
  // layer's in layer order, then the embedding, stack exit and MTP modules' own, then the shared
  // copies. Empty while model.vocab_size is unset (the tokenizer not yet resolved).
  std::vector<ManifestParameter> parameters;
};

// The manifest of a resolved model section. Sites per layer (owner "decoder.layers.N" or an MTP
// inner layer's module path): residual_accumulator and residual_contribution, an mHC wrapper's
// sites, then the layer kind's own (docs/observation.md lists them); once per model:
// output_layer.output_logits and output_layer.mtp_logits.<k>, k = 0..D−1 (Megatron's
// process_mtp_loss numbers the MTP logit sites from 0; the losses stay mtp_1 .. mtp_D).
// Parameters: the whole model built as one chunk at tp = 1, on the meta device.
ModelManifest build_model_manifest(const ResolvedModelConfig& m);
// The same without the parameters (empty), and so without the meta build: for readers of the
// layers, sites and losses only (config validation runs them on every validate()).
ModelManifest describe_model(const ResolvedModelConfig& m);
// The same with each layer's stage and chunk under `parallel` (validated, the hybrid pattern's `|`
// segments applied): parallel/pipeline_layout.h's split, or the hybrid segments; the MTP layers on
// the last stage's last chunk, with the output layer. Parameters: each stage's chunks built as
// the model factory builds them (the embedding on the first, the stack exit and MTP modules on the
// last, with pp > 1 the last stage's copies of the word embeddings) at the layout's tp and expert
// tp (the vocabulary padded at tp), each expert listed once.
ModelManifest build_model_manifest(const ResolvedModelConfig& m, const ParallelConfig& parallel);

// The loss of MTP depth k (1-based): "mtp_<k> loss" (Megatron's process_mtp_loss names).
std::string mtp_loss_name(int64_t depth);
// Whether `name` is some depth's MTP loss ("mtp_<k> loss", k ≥ 1).
bool is_mtp_loss_name(const std::string& name);

}  // namespace strata
