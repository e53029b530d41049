// MTP with mHC under model parallelism on 2 CPU ranks ([mhc2][mtp], ctest mpi_mhc_np2): layout
// equivalence against the single-rank run (layout_check.h: 10 losses and grad norms within 1e-5
// relative, every step-1 gradient within 1e-5, absolute below 1e-4 as in test_mhc_layouts.cpp) of a
// GPT with n = 3 streams and two MTP depths: PP2 (the decoder's pre-contraction streams handed to
// the MTP block on the last stage; tied, and untied with the mean contraction), TP2 + sequence
// parallelism (e_proj / h_proj column-parallel, their sum gathered over tp and scattered back to
// the rank's rows; the depths' hc_head_* summed over tp); a hybrid model with '|' segments and a
// '/' depth under PP2.
// Reference: Megatron-LM dev multi_token_prediction.py (_concat_embeddings, mHC branch).
#include <string>
#include <vector>

#include "layout_check.h"

namespace strata {
namespace {

constexpr double kGradFloor = 1e-4;

std::vector<std::string> mhc_mtp(std::vector<std::string> layout) {
  std::vector<std::string> all = {"model.enable_hyper_connections=true", "model.num_residual_streams=3",
                                  "model.mhc_sinkhorn_iterations=6", "model.mtp_num_layers=2",
                                  "model.position_embedding_type=rope"};
  all.insert(all.end(), layout.begin(), layout.end());
  return all;
}

}  // namespace

TEST_CASE("mhc mtp layouts: PP2 with the MTP depths on the last stage matches PP1 (tied; untied, mean)",
          "[mhc2][mtp]") {
  mpitest::check_layout(mhc_mtp({"parallel.pipeline_model_parallel_size=2"}), 2, nullptr, kGradFloor);
  mpitest::check_layout(mhc_mtp({"parallel.pipeline_model_parallel_size=2", "model.mhc_learned_output_contract=false",
                                 "model.untie_embeddings_and_output_weights=true"}),
                        2, nullptr, kGradFloor);
}

TEST_CASE("mhc mtp layouts: TP2 + sequence parallelism (e_proj, h_proj column-parallel) matches", "[mhc2][mtp]") {
  mpitest::check_layout(mhc_mtp({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}), 2,
                        nullptr, kGradFloor);
}

TEST_CASE("mhc mtp layouts: hybrid PP2 with '|' segments and a '/' depth matches PP1", "[mhc2][mtp]") {
  const std::vector<std::string> common = {"model.enable_hyper_connections=true", "model.num_residual_streams=3",
                                           "model.mhc_sinkhorn_iterations=6", "model.num_experts=4",
                                           "model.moe_ffn_hidden_size=16", "model.add_bias_linear=false",
                                           "model.moe_aux_loss_coeff=0.01", "model.position_embedding_type=rope",
                                           "model.mamba_head_dim=16", "model.mamba_num_groups=2",
                                           "model.mamba_state_dim=8", "model.mamba_chunk_size=8"};
  std::vector<std::string> layout = common, baseline = common;
  layout.push_back("model.hybrid_layer_pattern=\"M*|E-/M*E\"");
  baseline.push_back("model.hybrid_layer_pattern=\"M*E-/M*E\"");
  layout.push_back("parallel.pipeline_model_parallel_size=2");
  mpitest::check_layout(layout, 2, &baseline, kGradFloor);
}

}  // namespace strata
