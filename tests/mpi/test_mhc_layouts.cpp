// mHC hyper-connections under model parallelism on 2 CPU ranks ([mhc2], ctest mpi_mhc_np2): layout
// equivalence against the single-rank run (layout_check.h: 10 losses and grad norms within 1e-5
// relative, every step-1 gradient within 1e-5) of a GPT with n = 3 residual streams, two mHC
// sites per layer and the learned hc_head contraction: TP2 + sequence parallelism (the sites'
// and the head's replicated parameters summed over tp), PP2 (the [s, b, n·h] streams cross the
// stage boundary; the expansion on the first stage, the head on the last), PP2 × VPP2, DP2 with
// the distributed optimizer, and EP2 with MoE layers inside the MLP sites; the mean contraction
// under PP2; CP2 (all-gather and ring); the GLM numerics under TP2 + SP and PP2; a hybrid `M*E-` model (fast and delta path)
// under PP2, TP2 + SP and EP2. Gradient errors count as absolute below 1e-4 (check_layout's grad_floor): the
// 1-element alpha gradients are sums over every token with heavy cancellation (alpha_res ~1e-8
// at init, where H_res ≈ 1/n), and tp's partial sums change their f32 rounding at ~5e-10.
// Reference: Megatron-LM dev pipeline_parallel/schedules.py (n·C tensor shapes),
// transformer/hyper_connection.py (sequence_parallel attributes).
#include <string>
#include <vector>

#include "layout_check.h"

namespace strata {
namespace {

constexpr double kGradFloor = 1e-4;

void check_layout(const std::vector<std::string>& layout, int world) {
  mpitest::check_layout(layout, world, nullptr, kGradFloor);
}

std::vector<std::string> mhc(std::vector<std::string> layout) {
  std::vector<std::string> all = {"model.enable_hyper_connections=true", "model.num_residual_streams=3",
                                  "model.mhc_sinkhorn_iterations=6"};
  all.insert(all.end(), layout.begin(), layout.end());
  return all;
}

// A hybrid model with mHC: `pattern` in the layout run, `flat` (without '|') in the baseline.
void check_hybrid(const std::string& pattern, const std::string& flat, const std::vector<std::string>& parallel) {
  const std::vector<std::string> common = {"model.num_experts=4",           "model.moe_ffn_hidden_size=16",
                                           "model.add_bias_linear=false",   "model.moe_aux_loss_coeff=0.01",
                                           "model.position_embedding_type=rope", "model.mamba_head_dim=16",
                                           "model.mamba_num_groups=2",      "model.mamba_state_dim=8",
                                           "model.mamba_chunk_size=8"};
  std::vector<std::string> layout = mhc(common), baseline = mhc(common);
  layout.push_back("model.hybrid_layer_pattern=\"" + pattern + "\"");
  baseline.push_back("model.hybrid_layer_pattern=\"" + flat + "\"");
  layout.insert(layout.end(), parallel.begin(), parallel.end());
  mpitest::check_layout(layout, 2, &baseline, kGradFloor);
}

}  // namespace

TEST_CASE("mhc layouts: hybrid (M * E -, one site per layer) PP2 with '|' segments and TP2 + SP match", "[mhc2]") {
  check_hybrid("M*|E-", "M*E-", {"parallel.pipeline_model_parallel_size=2"});
  check_hybrid("M*E-", "M*E-", {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"});
}

TEST_CASE("mhc layouts: hybrid EP2 (the E layers' experts split over 2 ranks, DP2 otherwise) matches", "[mhc2]") {
  check_hybrid("M*E-", "M*E-", {"parallel.expert_model_parallel_size=2"});
}

TEST_CASE("mhc layouts: the GLM numerics (eps inside the sqrt, f32 mappings, mean contraction) under TP2 + SP and PP2",
          "[mhc2]") {
  const std::vector<std::string> glm = {"model.mhc_norm_eps_inside_sqrt=true", "model.mhc_keep_mappings_in_fp32=true",
                                        "model.mhc_learned_output_contract=false",
                                        "model.untie_embeddings_and_output_weights=true"};
  std::vector<std::string> tp = mhc(glm), pp = mhc(glm);
  for (const char* o : {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}) tp.push_back(o);
  pp.push_back("parallel.pipeline_model_parallel_size=2");
  check_layout(tp, 2);
  check_layout(pp, 2);
}

TEST_CASE("mhc layouts: CP2 (the streams split over the sequence, all-gather and ring attention) matches", "[mhc2]") {
  // The sites act per token; the merges' dropout masks follow the global positions of the CP chunks.
  check_layout(mhc({"parallel.context_parallel_size=2", "parallel.cp_comm_type=all_gather"}), 2);
  check_layout(mhc({"parallel.context_parallel_size=2", "parallel.cp_comm_type=p2p"}), 2);
}

TEST_CASE("mhc layouts: TP2 matches the single-rank run", "[mhc2]") {
  check_layout(mhc({"parallel.tensor_model_parallel_size=2"}), 2);
}

TEST_CASE("mhc layouts: TP2 + sequence parallelism matches the single-rank run", "[mhc2]") {
  check_layout(mhc({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}), 2);
}

TEST_CASE("mhc layouts: PP2 (n streams cross the stages), learned and mean contraction", "[mhc2]") {
  check_layout(mhc({"parallel.pipeline_model_parallel_size=2"}), 2);
  check_layout(mhc({"parallel.pipeline_model_parallel_size=2", "model.mhc_learned_output_contract=false",
                    "model.untie_embeddings_and_output_weights=true"}),
               2);
}

TEST_CASE("mhc layouts: PP2 x VPP2 (interleaved) matches", "[mhc2]") {
  check_layout(mhc({"parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2"}), 2);
}

TEST_CASE("mhc layouts: DP2 with the distributed optimizer matches", "[mhc2]") {
  check_layout(mhc({"parallel.use_distributed_optimizer=true"}), 2);
}

TEST_CASE("mhc layouts: EP2 with MoE layers in the MLP sites matches", "[mhc2]") {
  check_layout(mhc({"model.add_bias_linear=false", "model.num_experts=4", "model.moe_ffn_hidden_size=16",
                    "model.moe_router_topk=2", "model.moe_aux_loss_coeff=0.01", "model.moe_layer_freq=[0, 1, 1, 0]",
                    "parallel.expert_model_parallel_size=2"}),
               2);
}

TEST_CASE("mhc layouts: selective mhc recompute under PP2 and PP2 x VPP2 matches the single-rank run without it",
          "[mhc2]") {
  // Each micro-batch's groups (per model chunk) keep their own state across 1F1B / interleaving.
  const std::vector<std::string> base = mhc({});
  for (const char* k : {"null", "1"}) {
    const std::vector<std::string> rc = {"model.recompute_granularity=selective", "model.recompute_modules=[mhc]",
                                         std::string("model.mhc_recompute_layer_num=") + k};
    std::vector<std::string> pp = mhc({"parallel.pipeline_model_parallel_size=2"});
    pp.insert(pp.end(), rc.begin(), rc.end());
    mpitest::check_layout(pp, 2, &base, kGradFloor);
    pp.push_back("parallel.virtual_pipeline_model_parallel_size=2");
    mpitest::check_layout(pp, 2, &base, kGradFloor);
  }
  std::vector<std::string> hybrid = {"model.num_experts=4",           "model.moe_ffn_hidden_size=16",
                                     "model.add_bias_linear=false",   "model.moe_aux_loss_coeff=0.01",
                                     "model.position_embedding_type=rope", "model.mamba_head_dim=16",
                                     "model.mamba_num_groups=2",      "model.mamba_state_dim=8",
                                     "model.mamba_chunk_size=8"};
  std::vector<std::string> flat = mhc(hybrid), split = mhc(hybrid);
  flat.push_back("model.hybrid_layer_pattern=\"M*E-\"");
  split.push_back("model.hybrid_layer_pattern=\"M*|E-\"");
  for (const char* o : {"parallel.pipeline_model_parallel_size=2", "model.recompute_granularity=selective",
                        "model.recompute_modules=[mhc]", "model.mhc_recompute_layer_num=1"})
    split.push_back(o);
  mpitest::check_layout(split, 2, &flat, kGradFloor);
}

}  // namespace strata
