// gpt-oss's attention under every layout (ctest mpi_gpt_oss_np2, 2 ranks, tag [gptoss2]): sliding
// windows shorter than the sequence on every other layer (Megatron window_size 3,0 with
// window_attn_skip_freq 2), learnable attention sinks (core_attention.softmax_offset, split over tp
// like the heads), biases in attention, router and experts, quick-GeGLU experts with the +1 linear
// offset and the clamp, YaRN positions: TP2 with sequence parallelism, CP2 in p2p, all_gather and
// a2a, PP2, EP2, and packed sequences with windows under TP2 + SP and CP2. Each run's 10 losses,
// grad norms and step-1 gradients match the single-rank run (mpitest::check_layout, 1e-5 relative).
// Reference: megatron/core/transformer/dot_product_attention.py (window_size, softmax_offset),
// megatron/core/transformer/moe/experts.py (the clamped GLU with glu_linear_offset).
#include "layout_check.h"

namespace strata {
namespace {

using mpitest::check_layout;

// gpt-oss's shape at hidden 32, sequence 16: windows of 4 keys on layers 1 and 3 (1-based).
std::vector<std::string> gpt_oss(std::vector<std::string> extra) {
  const std::vector<std::string> base = {
      "model.window_size=[3, 0]",         "model.window_attn_skip_freq=2", "model.softmax_type=learnable",
      "model.add_bias_linear=true",       "model.group_query_attention=true",    "model.num_query_groups=2",
      "model.normalization=RMSNorm",      "model.position_embedding_type=yarn",  "model.rotary_scaling_factor=4",
      "model.yarn_original_max_position_embeddings=4", "model.yarn_correction_range_round_to_int=false",
      "model.num_experts=4",              "model.moe_ffn_hidden_size=16",        "model.moe_router_topk=2",
      "model.quick_geglu=true",           "model.glu_linear_offset=1.0",         "model.activation_func_clamp_value=0.5",
      "model.moe_aux_loss_coeff=0.01",    "model.moe_token_dispatcher_type=alltoall"};
  extra.insert(extra.end(), base.begin(), base.end());
  return extra;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kPacked = {"data.reset_position_ids=true", "data.reset_attention_mask=true",
                                          "data.eod_mask_loss=true", "optimizer.lr=3e-3"};

}  // namespace

TEST_CASE("gpt-oss layouts: TP2 + sequence parallelism", "[gptoss2]") {
  // Megatron refuses MoE biases under expert tensor parallelism, which defaults to tp: etp 1.
  check_layout(gpt_oss({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                        "parallel.expert_tensor_parallel_size=1"}),
               2);
}

TEST_CASE("gpt-oss layouts: CP2 p2p, all_gather and a2a", "[gptoss2]") {
  for (const char* comm : {"p2p", "all_gather", "a2a"})
    check_layout(gpt_oss({"parallel.context_parallel_size=2", std::string("parallel.cp_comm_type=") + comm}), 2);
}

TEST_CASE("gpt-oss layouts: PP2", "[gptoss2]") { check_layout(gpt_oss({"parallel.pipeline_model_parallel_size=2"}), 2); }

TEST_CASE("gpt-oss layouts: EP2", "[gptoss2]") { check_layout(gpt_oss({"parallel.expert_model_parallel_size=2"}), 2); }

TEST_CASE("gpt-oss layouts: packed sequences with windows under TP2 + SP and CP2", "[gptoss2]") {
  check_layout(gpt_oss(with({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                              "parallel.expert_tensor_parallel_size=1"},
                             kPacked)),
               2);
  check_layout(gpt_oss(with({"parallel.context_parallel_size=2", "parallel.cp_comm_type=p2p"}, kPacked)), 2);
}

}  // namespace strata
