// The model manifest: layers, sites and losses of a resolved config, and the parameters of its meta
// build (see model_manifest.h).
#include "models/model_manifest.h"

#include <algorithm>

#include "models/config/hybrid_pattern.h"
#include "models/layers/loss.h"
#include "models/manifest_parameters.h"
#include "parallel/pipeline_layout.h"

namespace strata {

namespace {

using manifest_detail::MetaChunk;
using manifest_detail::MetaTensorParallel;

// The layers of one stack, each with its kind's sites (mHC wrapper included).
void add_stack(ModelManifest& out, const ResolvedModelConfig& m, const std::vector<StackLayerSpec>& stack, bool mtp) {
  for (const StackLayerSpec& s : stack) {
    out.layers.push_back(ManifestLayer{s.place.name, s.kind->symbol, s.place.index, mtp});
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

// Layers, sites and losses (the parameters are the caller's: they need the chunks).
ModelManifest describe_layers(const ResolvedModelConfig& m) {
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
  return out;
}

// The parameters of these chunks from their meta build; none before the vocabulary is known.
void add_parameters(ModelManifest& out, const ResolvedModelConfig& m, const std::vector<MetaChunk>& chunks,
                    const MetaTensorParallel& at) {
  if (m->vocab_size) out.parameters = manifest_detail::chunk_parameters(m, out.layers, chunks, at);
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

int64_t ManifestParameter::local_elements(int64_t tp, int64_t etp) const {
  const int64_t split = !tensor_parallel ? 1 : expert >= 0 ? etp : tp;
  return shape.numel() / split;
}

ModelManifest describe_model(const ResolvedModelConfig& m) { return describe_layers(m); }

ModelManifest build_model_manifest(const ResolvedModelConfig& m) {
  ModelManifest out = describe_layers(m);
  MetaChunk whole;  // every layer, the embedding and the output layer
  whole.layout = PipelineChunkLayout{0, m->num_layers, true, true};
  add_parameters(out, m, {whole}, MetaTensorParallel{});
  return out;
}

ModelManifest build_model_manifest(const ResolvedModelConfig& m, const ParallelConfig& parallel) {
  ModelManifest out = describe_layers(m);
  const int64_t pp = parallel.pipeline_model_parallel_size, chunks = num_model_chunks(parallel);
  out.chunks.assign(static_cast<size_t>(pp), std::vector<ChunkLayers>(static_cast<size_t>(chunks)));
  std::vector<MetaChunk> built;
  for (int64_t stage = 0; stage < pp; ++stage)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const PipelineChunkLayout c = m->is_hybrid() ? hybrid::hybrid_chunk_layout(m.hybrid_pattern(), parallel, stage, chunk)
                                                  : pipeline_chunk_layout(parallel, m->num_layers, stage, chunk);
      out.chunks[static_cast<size_t>(stage)][static_cast<size_t>(chunk)] = ChunkLayers{c.first_layer, c.num_layers};
      for (int64_t l = c.first_layer; l < c.first_layer + c.num_layers; ++l) {
        ManifestLayer& layer = out.layers[static_cast<size_t>(l)];
        layer.stage = stage, layer.chunk = chunk;
      }
      built.push_back(MetaChunk{stage, chunk, c});
    }
  for (ManifestLayer& layer : out.layers)
    if (layer.mtp) layer.stage = pp - 1, layer.chunk = chunks - 1;
  const int64_t tp = parallel.tensor_model_parallel_size;
  add_parameters(out, m, built,
                 MetaTensorParallel{tp, parallel.expert_tensor_parallel_size.value_or(tp), parallel.sequence_parallel});
  return out;
}

}  // namespace strata
