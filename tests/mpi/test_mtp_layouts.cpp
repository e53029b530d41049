// Multi-token prediction under tensor parallelism (ctest mpi_tp_np2, 2 ranks): the MTP heads'
// eh_proj column-parallel (output gathered over tp; with sequence parallelism its input gathered
// along the sequence and its output scattered back), the vocab-parallel MTP embedding lookup and
// output heads; layout equivalence against the single-rank run (mpitest::check_layout: 10 losses
// and grad norms within 1e-5 relative, every gradient after step 1 within 1e-5). The GPT PP2 case
// is in test_pipeline_parallel.cpp. Hybrid MTP ('/' patterns, a nested LayerStack per depth):
// PP2 with '|' segments and the MTP depths on the last stage, with full recompute, and PP2 × VPP2
// (MTP on the last model chunk; ctest mpi_pipeline_np2, [pipeline]), and TP2 + sequence
// parallelism (mpi_tp_np2).
// Reference: megatron/core/transformer/multi_token_prediction.py (_concat_embeddings),
// megatron/core/models/hybrid/hybrid_model.py (MTP forced onto the final stage).
#include "layout_check.h"

namespace strata {
namespace {

using mpitest::check_layout;

TEST_CASE("mtp layouts: TP2 with MTP heads matches the single-rank run", "[tp][mtp]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "model.position_embedding_type=rope", "model.mtp_num_layers=2"},
               2);
}

TEST_CASE("mtp layouts: TP2 + sequence parallelism, untied, MTP heads", "[tp][mtp]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                "model.position_embedding_type=rope", "model.mtp_num_layers=1",
                "model.untie_embeddings_and_output_weights=true"},
               2);
}

const std::vector<std::string> kHybridMoe = {"model.num_experts=4", "model.moe_ffn_hidden_size=16",
                                             "model.add_bias_linear=false", "model.moe_aux_loss_coeff=0.01",
                                             "model.position_embedding_type=rope", "model.mamba_head_dim=16",
                                             "model.mamba_num_groups=2", "model.mamba_state_dim=8",
                                             "model.mamba_chunk_size=8"};

// `pattern` in the layout run, `flat` (its layers without '|') in the single-rank baseline.
void check_hybrid_mtp(const std::string& pattern, const std::string& flat, const std::vector<std::string>& extra) {
  std::vector<std::string> layout = kHybridMoe, baseline = kHybridMoe;
  layout.push_back("model.hybrid_layer_pattern=\"" + pattern + "\"");
  baseline.push_back("model.hybrid_layer_pattern=\"" + flat + "\"");
  for (const auto& o : extra) {
    layout.push_back(o);
    if (o.rfind("parallel.", 0) != 0) baseline.push_back(o);
  }
  check_layout(layout, mpitest::world().size(), &baseline);
}

}  // namespace

TEST_CASE("mtp layouts: hybrid PP2 with '|' segments, MTP depths on the last stage, matches PP1", "[pipeline][mtp]") {
  check_hybrid_mtp("M*|E-/M*E/M*E", "M*E-/M*E/M*E", {"parallel.pipeline_model_parallel_size=2"});
  check_hybrid_mtp("*E|M-/E-", "*EM-/E-",
                   {"parallel.pipeline_model_parallel_size=2", "model.recompute_granularity=full",
                    "model.recompute_method=uniform", "model.recompute_num_layers=1",
                    "model.untie_embeddings_and_output_weights=true"});
}

TEST_CASE("mtp layouts: hybrid PP2 x VPP2 (four '|' segments), MTP on the last model chunk, matches", "[pipeline][mtp]") {
  check_hybrid_mtp("*|-E|M-|-*/*E/*E", "*-EM--*/*E/*E", {"parallel.pipeline_model_parallel_size=2"});
}

TEST_CASE("mtp layouts: hybrid TP2 + sequence parallelism with MTP depths matches", "[tp][mtp]") {
  check_hybrid_mtp("M*E-/M*E", "M*E-/M*E", {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"});
}

}  // namespace strata
