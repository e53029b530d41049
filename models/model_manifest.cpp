// The model manifest: layers, sites, losses and parameters of a resolved config (see model_manifest.h).
#include "models/model_manifest.h"

#include <algorithm>

#include "models/config/hybrid_pattern.h"
#include "models/layers/embedding.h"
#include "models/layers/loss.h"
#include "models/manifest_parameters.h"
#include "parallel/pipeline_layout.h"

namespace strata {

namespace {

// The layers of one stack: each with its kind's parameters and sites (mHC wrapper included).
void add_stack(ModelManifest& out, const ResolvedModelConfig& m, const std::vector<StackLayerSpec>& stack, bool mtp) {
  for (const StackLayerSpec& s : stack) {
    out.layers.push_back(ManifestLayer{s.place.name, s.kind->symbol, s.place.index, mtp});
    ParameterList parameters(out.parameters, m, static_cast<int64_t>(out.layers.size()) - 1);
    add_stack_layer_parameters(m, s, parameters);
    add_stack_layer_sites(m, s, out.sites);
  }
}

// The MTP modules' inner layers (models/blocks/mtp_block.h); one module when the layer is repeated.
void add_mtp_layers(ModelManifest& out, const ResolvedModelConfig& m) {
  const int64_t modules = m->mtp_use_repeated_layer ? std::min<int64_t>(m->mtp_depths(), 1) : m->mtp_depths();
  const size_t first_site = out.sites.size();
  for (int64_t k = 0; k < modules; ++k) add_stack(out, m, mtp_stack_specs(m, k), true);
  if (m->mtp_use_repeated_layer)  // one module applied at every depth
    for (size_t i = first_site; i < out.sites.size(); ++i) out.sites[i].per_forward = m->mtp_depths();
}

// Each parameter on its layer's stage and chunk; the embedding on the first, the rest on the last;
// the last stage's copies of the word embeddings (models/language_model_shell.h).
void place_parameters(ModelManifest& out, const ResolvedModelConfig& m, int64_t pp, int64_t chunks) {
  std::vector<ManifestParameter> copies;
  for (ManifestParameter& p : out.parameters) {
    if (p.layer >= 0) {
      const ManifestLayer& l = out.layers[static_cast<size_t>(p.layer)];
      p.stage = l.stage, p.chunk = l.chunk;
    } else if (p.name.rfind("embedding.", 0) == 0) {
      p.stage = 0, p.chunk = 0;
      const bool copy = pp > 1 && p.name == layers::VocabEmbedding::kWordEmbeddingsName &&
                        (!m->untie_embeddings_and_output_weights || m->mtp_depths() > 0);
      if (copy) {
        copies.push_back(p);
        copies.back().shared_copy = true, copies.back().stage = pp - 1, copies.back().chunk = chunks - 1;
      }
    } else {
      p.stage = pp - 1, p.chunk = chunks - 1;
    }
  }
  for (ManifestParameter& c : copies) out.parameters.push_back(std::move(c));
}

// Layers, sites, losses and parameters (vocabulary padded at tp), all on stage 0.
ModelManifest build_manifest(const ResolvedModelConfig& m, int64_t tp) {
  ModelManifest out;
  add_stack(out, m, decoder_stack_specs(m, 0, m->num_layers), false);
  add_mtp_layers(out, m);
  out.sites.push_back(ObservationSite{"output_layer", source_kind_name(SourceKind::OutputLogits), SourceKind::OutputLogits});
  for (int64_t k = 0; k < m->mtp_depths(); ++k)
    out.sites.push_back(ObservationSite{"output_layer", std::string(source_kind_name(SourceKind::MtpLogits)) + "." +
                                                            std::to_string(k),
                                        SourceKind::MtpLogits});
  out.losses = {kLmLossName};
  for (int64_t k = 1; k <= m->mtp_depths(); ++k) out.losses.push_back(mtp_loss_name(k));
  for (const std::string& n : model_layer_loss_names(m)) out.losses.push_back(n);
  if (!m->vocab_size) {  // the parameters need the vocabulary: none listed before it is known
    out.parameters.clear();
    return out;
  }
  manifest_detail::add_model_parameters(out, m, tp);
  return out;
}

}  // namespace

std::string mtp_loss_name(int64_t depth) { return "mtp_" + std::to_string(depth) + " loss"; }

bool is_mtp_loss_name(const std::string& name) {
  const std::string prefix = "mtp_", suffix = " loss";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string depth = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  return depth.find_first_not_of("0123456789") == std::string::npos && depth[0] != '0';
}

ModelManifest build_model_manifest(const ResolvedModelConfig& m) { return build_manifest(m, 1); }

ModelManifest build_model_manifest(const ResolvedModelConfig& m, const ParallelConfig& parallel) {
  ModelManifest out = build_manifest(m, parallel.tensor_model_parallel_size);
  const int64_t pp = parallel.pipeline_model_parallel_size, chunks = num_model_chunks(parallel);
  out.chunks.assign(static_cast<size_t>(pp), std::vector<ChunkLayers>(static_cast<size_t>(chunks)));
  for (int64_t stage = 0; stage < pp; ++stage)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const PipelineChunkLayout c = m->is_hybrid() ? hybrid::hybrid_chunk_layout(m.hybrid_pattern(), parallel, stage, chunk)
                                                  : pipeline_chunk_layout(parallel, m->num_layers, stage, chunk);
      out.chunks[static_cast<size_t>(stage)][static_cast<size_t>(chunk)] = ChunkLayers{c.first_layer, c.num_layers};
      for (int64_t l = c.first_layer; l < c.first_layer + c.num_layers; ++l) {
        ManifestLayer& layer = out.layers[static_cast<size_t>(l)];
        layer.stage = stage, layer.chunk = chunk;
      }
    }
  for (ManifestLayer& layer : out.layers)
    if (layer.mtp) layer.stage = pp - 1, layer.chunk = chunks - 1;
  place_parameters(out, m, pp, chunks);
  return out;
}

}  // namespace strata
