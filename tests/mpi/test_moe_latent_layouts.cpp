// Latent MoE (model.moe_latent_size) and the MoE biases (add_bias_linear) under every layout
// (ctest mpi_moe_latent_np2, 2 ranks, tag [moe_latent2]): a Nemotron-3-like latent MoE (sigmoid
// routing, aux-loss-free expert bias, seq_aux_loss, a hidden-size shared expert) under EP2 with the
// alltoall and the allgather dispatchers, TP2 + sequence parallelism with etp 2 (the duplicated
// latent projections' gradients summed over tp), PP2, recompute of the moe modules under TP2 + SP,
// and as the hybrid `E` layers of an "ME*E" model under TP2 + SP; a gpt-oss-like MoE with every
// bias (router, experts, latent projections; SwiGLU, softmax, no shared expert) under EP2, TP2 +
// SP with etp 1 (the router bias's gradient summed over tp) and PP2: 10 losses, grad norms and
// step-1 gradients match the single-rank run (mpitest::check_layout, 1e-5 relative).
// Reference: megatron/core/transformer/moe/moe_layer.py (fc1_latent_proj / fc2_latent_proj,
// TELinear parallel_mode="duplicated"), experts.py (_apply_bias), router.py (bias).
#include <algorithm>

#include "layout_check.h"

namespace strata {
namespace {

using mpitest::check_layout;

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Nemotron-3 Super's MoE shape at hidden 32: latent 12, experts of 16, a shared expert of 24.
const std::vector<std::string> kNemotron = {
    "model.num_experts=4",                         "model.moe_ffn_hidden_size=16",
    "model.moe_latent_size=12",                    "model.moe_router_topk=2",
    "model.moe_router_score_function=sigmoid",     "model.moe_router_enable_expert_bias=true",
    "model.moe_router_topk_scaling_factor=2.5",    "model.moe_router_load_balancing_type=seq_aux_loss",
    "model.moe_aux_loss_coeff=0.01",               "model.moe_shared_expert_intermediate_size=24",
    "model.moe_token_dispatcher_type=alltoall",    "model.add_bias_linear=false",
    "model.normalization=RMSNorm",                 "model.position_embedding_type=rope",
    "model.moe_layer_freq=\"([0]*1+[1]*3)\""};

// gpt-oss's MoE at hidden 32: every bias, SwiGLU experts, softmax over the top-k logits, latent too.
const std::vector<std::string> kBiased = {
    "model.num_experts=4",        "model.moe_ffn_hidden_size=16",     "model.moe_router_topk=2",
    "model.swiglu=true",          "model.ffn_hidden_size=32",         "model.add_bias_linear=true",
    "model.moe_latent_size=12",   "model.moe_aux_loss_coeff=0.01",    "model.moe_z_loss_coeff=0.001",
    "model.moe_token_dispatcher_type=alltoall"};

}  // namespace

TEST_CASE("moe latent layouts: EP2 with the alltoall and allgather dispatchers", "[moe_latent2]") {
  check_layout(with(kNemotron, {"parallel.expert_model_parallel_size=2"}), 2);
  check_layout(with(kNemotron, {"parallel.expert_model_parallel_size=2", "model.moe_token_dispatcher_type=allgather"}),
               2);
}

TEST_CASE("moe latent layouts: TP2 + sequence parallelism with expert tp 2", "[moe_latent2]") {
  check_layout(with(kNemotron, {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}), 2);
}

TEST_CASE("moe latent layouts: PP2", "[moe_latent2]") {
  check_layout(with(kNemotron, {"parallel.pipeline_model_parallel_size=2"}), 2);
}

TEST_CASE("moe latent layouts: recompute of the moe modules under TP2 + SP", "[moe_latent2]") {
  check_layout(with(kNemotron, {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                                "model.recompute_granularity=selective",
                                "model.recompute_modules=[moe, moe_act, shared_experts]", "model.moe_grouped_gemm=true"}),
               2);
}

TEST_CASE("moe latent layouts: hybrid ME*E with latent MoE under TP2 + SP", "[moe_latent2]") {
  std::vector<std::string> o = with(kNemotron, {"parallel.tensor_model_parallel_size=2",
                                                "parallel.sequence_parallel=true", "model.hybrid_layer_pattern=\"ME*E\"",
                                                "model.mamba_head_dim=16", "model.mamba_num_groups=2",
                                                "model.mamba_state_dim=8", "model.mamba_chunk_size=8"});
  o.erase(std::remove(o.begin(), o.end(), std::string("model.moe_layer_freq=\"([0]*1+[1]*3)\"")), o.end());
  check_layout(o, 2);
}

TEST_CASE("moe bias layouts: router and expert biases under EP2, TP2 + SP with etp 1, PP2", "[moe_latent2]") {
  check_layout(with(kBiased, {"parallel.expert_model_parallel_size=2"}), 2);
  check_layout(with(kBiased, {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                              "parallel.expert_tensor_parallel_size=1"}),
               2);
  check_layout(with(kBiased, {"parallel.pipeline_model_parallel_size=2"}), 2);
}

}  // namespace strata
