// The resolved description of a built model, derived from its resolved config: the layers in
// order (decoder, then the MTP depths' inner layers), the observation sites each emits
// (core/observe.h), the named losses and the parameters, so that the tensor dumper, the metric
// checks, the loss channel and the planner read the model from one place. Each layer's part is its
// layer kind's own description (models/config/layer_kind.h) of the stacks the model builds
// (models/config/model_stacks.h); the manifest adds the model-level parts (embedding, stack exit, MTP
// modules, output layer).
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

// The manifest of a resolved model section. Sites per layer (owner "decoder.layers.N" or an MTP
// inner layer's module path): residual_accumulator and residual_contribution, an mHC wrapper's
// sites, then the layer kind's own (docs/observation.md lists them); once per model:
// output_layer.output_logits and output_layer.mtp_logits.<k>, k = 0..D−1 (Megatron's
// process_mtp_loss numbers the MTP logit sites from 0; the losses stay mtp_1 .. mtp_D).
// Parameters at tp = 1, on one stage.
ModelManifest build_model_manifest(const ResolvedModelConfig& m);
// The same with each layer's stage and chunk under `parallel` (validated, the hybrid pattern's `|`
// segments applied): parallel/pipeline_layout.h's split, or the hybrid segments; the MTP layers on
// the last stage's last chunk, with the output layer. Parameters: the vocabulary padded at the
// layout's tp; the embedding on stage 0's first chunk, the stack exit and MTP modules with the
// output layer; with pp > 1 the last stage also builds a copy of the word embeddings when they are
// tied to the output layer, or (untied) for the MTP depths' lookups.
ModelManifest build_model_manifest(const ResolvedModelConfig& m, const ParallelConfig& parallel);

// The loss of MTP depth k (1-based): "mtp_<k> loss" (Megatron's process_mtp_loss names).
std::string mtp_loss_name(int64_t depth);
// Whether `name` is some depth's MTP loss ("mtp_<k> loss", k ≥ 1).
bool is_mtp_loss_name(const std::string& name);

}  // namespace strata
