// The model-level parameters of the model manifest (see manifest_parameters.h): the vocabulary rows
// split over tp, the MTP projections column-parallel, norms replicated, the mHC heads f32. (Each
// layer's parameters are its layer kind's description, models/config/layer_kind.h.)
#include "models/manifest_parameters.h"

#include <algorithm>

#include "models/layers/embedding.h"

namespace strata::manifest_detail {

namespace {

// The learned output contraction of a stack's exit (none with mhc_learned_output_contract false).
void mhc_head(ParameterList& a, const std::string& owner) {
  const ResolvedModelConfig& m = a.m();
  if (!m->enable_hyper_connections || !m->mhc_learned_output_contract) return;
  const int64_t n = m->num_residual_streams;
  a.add(owner + ".hc_head_fn", Shape{n, n * m->hidden_size}, false, true);
  a.add(owner + ".hc_head_base", Shape{n}, false, true);
  a.add(owner + ".hc_head_scale", Shape{1}, false, true);
}

}  // namespace

void add_model_parameters(ModelManifest& out, const ResolvedModelConfig& m, int64_t tp) {
  ParameterList a(out.parameters, m, -1);
  const int64_t C = m->hidden_size, vocab = m->padded_vocab(tp);
  a.add(layers::VocabEmbedding::kWordEmbeddingsName, Shape{vocab, C}, true);
  if (m->position_embedding_type == PositionEmbeddingType::LearnedAbsolute)
    a.add("embedding.position_embeddings.weight", Shape{m.max_positions(), C});
  mhc_head(a, "decoder");
  a.norm(m->is_hybrid() ? "decoder.final_norm" : "decoder.final_layernorm", C);
  if (m->untie_embeddings_and_output_weights) a.add("output_layer.weight", Shape{vocab, C}, true);
  const int64_t modules = m->mtp_use_repeated_layer ? std::min<int64_t>(m->mtp_depths(), 1) : m->mtp_depths();
  for (int64_t k = 0; k < modules; ++k) {  // models/blocks/mtp_block.h
    const std::string p = "mtp.layers." + std::to_string(k);
    a.norm(p + ".enorm", C);
    a.norm(p + ".hnorm", C);
    if (m->enable_hyper_connections) {
      a.add(p + ".e_proj.weight", Shape{C, C}, true);
      a.add(p + ".h_proj.weight", Shape{C, C}, true);
      mhc_head(a, p);
    } else {
      a.add(p + ".eh_proj.weight", Shape{C, 2 * C}, true);
    }
    a.norm(p + ".final_layernorm", C);
  }
}

}  // namespace strata::manifest_detail
