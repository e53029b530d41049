// The model manifest: layers and observation sites of a finalized config (see model_manifest.h).
#include "models/model_manifest.h"

#include "models/hybrid/hybrid_pattern.h"
#include "models/layers/embedding.h"
#include "models/layers/moe/moe_layer.h"
#include "models/loss.h"
#include "models/manifest_parameters.h"
#include "parallel/pipeline_layout.h"

namespace strata {

namespace {

constexpr SourceKind kRouterKinds[] = {SourceKind::RouterInput,       SourceKind::RouterLogits,
                                       SourceKind::RouterScores,      SourceKind::RouterTopkProbs,
                                       SourceKind::RouterDiagnostics, SourceKind::RouterTopIndices,
                                       SourceKind::RouterTopKept,     SourceKind::RouterDiagnosticSums};
constexpr SourceKind kMhcKinds[] = {SourceKind::MhcHPre,       SourceKind::MhcHPost,
                                    SourceKind::MhcHRes,       SourceKind::MhcSinkhornResidual,
                                    SourceKind::MhcLayerInput, SourceKind::MhcLayerOutput};

// What a layer holds: the sub-modules that emit sites.
struct LayerParts {
  bool attention = false, moe = false, mhc = false;
};

void add(std::vector<ObservationSite>& sites, const std::string& owner, SourceKind kind) {
  sites.push_back(ObservationSite{owner, source_kind_name(kind), kind});
}

// GPT TransformerLayer: attention + MLP/MoE, two hyper-connection sites with mHC.
void add_transformer_layer_sites(std::vector<ObservationSite>& sites, const std::string& layer, const LayerParts& p) {
  add(sites, layer, SourceKind::ResidualAccumulator);
  add(sites, layer, SourceKind::ResidualContribution);
  if (p.mhc)
    for (const char* hc : {".self_attention_hyper_connection", ".mlp_hyper_connection"})
      for (SourceKind k : kMhcKinds) add(sites, layer + hc, k);
  if (p.attention) add(sites, layer + ".self_attention", SourceKind::AttentionLogitMax);
  if (p.moe)
    for (SourceKind k : kRouterKinds) add(sites, layer + ".mlp.router", k);
}

// A hybrid layer: with mHC one hyper-connection site wraps the plain layer, named inner_layer.
void add_hybrid_layer_sites(std::vector<ObservationSite>& sites, const std::string& layer, char symbol, bool mhc) {
  add(sites, layer, SourceKind::ResidualAccumulator);
  add(sites, layer, SourceKind::ResidualContribution);
  if (mhc)
    for (SourceKind k : kMhcKinds) add(sites, layer + ".hyper_connection", k);
  const std::string inner = mhc ? layer + ".inner_layer" : layer;
  if (symbol == hybrid::kAttention) add(sites, inner + ".self_attention", SourceKind::AttentionLogitMax);
  if (symbol == hybrid::kMoe)
    for (SourceKind k : kRouterKinds) add(sites, inner + ".mlp.router", k);
}

void add_layer(ModelManifest& out, const ResolvedModelConfig& m, const std::string& name, char symbol, int64_t number,
               bool mtp, bool moe) {
  out.layers.push_back(ManifestLayer{name, symbol, number, mtp});
  manifest_detail::add_layer_parameters(out, m, static_cast<int64_t>(out.layers.size()) - 1, moe);
  if (m.is_hybrid())
    add_hybrid_layer_sites(out.sites, name, symbol, m.enable_hyper_connections);
  else
    add_transformer_layer_sites(out.sites, name, LayerParts{true, moe, m.enable_hyper_connections});
}

// The MTP modules' inner layers (models/blocks/mtp_block.h): GPT one layer with the decoder's last
// layer spec, hybrid the '/' pattern's layers; one module when the layer is repeated.
void add_mtp_layers(ModelManifest& out, const ResolvedModelConfig& m, const std::string& mtp_pattern) {
  const int64_t modules = m.mtp_use_repeated_layer ? 1 : m.mtp_depths();
  const int64_t width = m.is_hybrid() ? static_cast<int64_t>(mtp_pattern.size()) : 1;
  const size_t first_site = out.sites.size();
  for (int64_t k = 0; k < modules; ++k) {
    const std::string path = mtp_model_layer_path(k);
    if (!m.is_hybrid()) {
      add_layer(out, m, path, 'T', m.num_layers + k, true, m.is_moe() && m.is_moe_layer(m.num_layers - 1));
      continue;
    }
    for (int64_t j = 0; j < width; ++j) {
      const char symbol = mtp_pattern[static_cast<size_t>(j)];
      add_layer(out, m, path + ".layers." + std::to_string(j), symbol, m.num_layers + k * width + j, true,
                symbol == hybrid::kMoe);
    }
  }
  if (m.mtp_use_repeated_layer)  // one module applied at every depth
    for (size_t i = first_site; i < out.sites.size(); ++i) out.sites[i].per_forward = m.mtp_depths();
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
                        (!m.untie_embeddings_and_output_weights || m.mtp_depths() > 0);
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
  const hybrid::HybridPattern& pattern = m.hybrid_pattern();
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const char symbol = m.is_hybrid() ? pattern.layers[static_cast<size_t>(l)] : 'T';
    add_layer(out, m, "decoder.layers." + std::to_string(l), symbol, l, false,
              m.is_moe() && m.is_moe_layer(l));
  }
  add_mtp_layers(out, m, pattern.mtp);
  add(out.sites, "output_layer", SourceKind::OutputLogits);
  for (int64_t k = 0; k < m.mtp_depths(); ++k)
    out.sites.push_back(ObservationSite{"output_layer", std::string(source_kind_name(SourceKind::MtpLogits)) + "." +
                                                            std::to_string(k),
                                        SourceKind::MtpLogits});
  out.losses = {kLmLossName};
  for (int64_t k = 1; k <= m.mtp_depths(); ++k) out.losses.push_back(mtp_loss_name(k));
  for (const std::string& n : layers::moe::moe_loss_names(m)) out.losses.push_back(n);
  if (!m.vocab_size) {  // the parameters need the vocabulary: none listed before it is known
    out.parameters.clear();
    return out;
  }
  manifest_detail::add_model_parameters(out, m, tp);
  return out;
}

}  // namespace

std::string mtp_model_layer_path(int64_t k) { return "mtp.layers." + std::to_string(k) + ".mtp_model_layer"; }

std::string mtp_loss_name(int64_t depth) { return "mtp_" + std::to_string(depth) + " loss"; }

ModelManifest build_model_manifest(const ResolvedModelConfig& m) { return build_manifest(m, 1); }

ModelManifest build_model_manifest(const ResolvedModelConfig& m, const ParallelConfig& parallel) {
  ModelManifest out = build_manifest(m, parallel.tensor_model_parallel_size);
  const int64_t pp = parallel.pipeline_model_parallel_size, chunks = num_model_chunks(parallel);
  out.chunks.assign(static_cast<size_t>(pp), std::vector<ChunkLayers>(static_cast<size_t>(chunks)));
  for (int64_t stage = 0; stage < pp; ++stage)
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const PipelineChunkLayout c = m.is_hybrid() ? hybrid::hybrid_chunk_layout(m.hybrid_pattern(), parallel, stage, chunk)
                                                  : pipeline_chunk_layout(parallel, m.num_layers, stage, chunk);
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

int64_t ManifestParameter::local_elements(int64_t tp, int64_t etp) const {
  const int64_t split = !tensor_parallel ? 1 : expert >= 0 ? etp : tp;
  return shape.numel() / split;
}

}  // namespace strata
