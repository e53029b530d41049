// Packed sequences under every layout that splits the sequence or the model (data.reset_position_ids
// + data.reset_attention_mask, documents planted in the mock samples by layout_training.h): the
// layout's 10 losses, grad norms and step-1 gradients match the single-rank packed run
// (mpitest::check_layout, 1e-5). With the single-rank packing identity (tests/unit/
// test_packed_sequences.cpp: every document as if alone, f64 within 1e-10) this makes each layout
// train every document as if alone. GPT with RoPE under TP2 + SP, CP2 with all_gather, p2p (blocks wholly
// before a rank's documents skipped) and a2a, CP4 a2a+p2p (2 x 2), and PP2; hybrid M*-E under TP2 + SP and PP2;
// MTP under TP2 + SP and PP2.
#include "layout_check.h"

namespace strata {
namespace {

using mpitest::check_layout;

const std::vector<std::string> kPacked = {"data.reset_position_ids=true", "data.reset_attention_mask=true",
                                          "data.eod_mask_loss=true", "model.position_embedding_type=rope"};

std::vector<std::string> packed(std::vector<std::string> extra) {
  extra.insert(extra.end(), kPacked.begin(), kPacked.end());
  return extra;
}

const std::vector<std::string> kHybrid = {"model.hybrid_layer_pattern=\"M*-E\"", "model.num_experts=4",
                                          "model.moe_ffn_hidden_size=16", "model.add_bias_linear=false",
                                          "model.mamba_head_dim=16", "model.mamba_num_groups=2",
                                          "model.mamba_state_dim=8", "model.mamba_chunk_size=4"};

std::vector<std::string> packed_hybrid(std::vector<std::string> extra) {
  extra.insert(extra.end(), kHybrid.begin(), kHybrid.end());
  return packed(extra);
}

}  // namespace

TEST_CASE("packed layouts: GPT RoPE, TP2 + sequence parallelism", "[tp][packed]") {
  check_layout(packed({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}), 2);
}

TEST_CASE("packed layouts: GPT RoPE, CP2 all_gather", "[cp][packed]") {
  check_layout(packed({"parallel.context_parallel_size=2", "parallel.cp_comm_type=all_gather"}), 2);
}

TEST_CASE("packed layouts: GPT RoPE, CP2 p2p (ring)", "[cp][packed]") {
  check_layout(packed({"parallel.context_parallel_size=2", "parallel.cp_comm_type=p2p"}), 2);
}

TEST_CASE("packed layouts: GPT RoPE, CP2 a2a", "[cp][packed]") {
  check_layout(packed({"parallel.context_parallel_size=2", "parallel.cp_comm_type=a2a"}), 2);
}

TEST_CASE("packed layouts: GPT RoPE, CP4 a2a+p2p with hierarchical sizes 2 2", "[cp4]") {
  check_layout(packed({"parallel.context_parallel_size=4", "parallel.cp_comm_type=a2a+p2p",
                       "parallel.hierarchical_context_parallel_sizes=[2, 2]"}),
               4);
}

TEST_CASE("packed layouts: GPT RoPE, PP2", "[pipeline][packed]") {
  check_layout(packed({"parallel.pipeline_model_parallel_size=2"}), 2);
}

TEST_CASE("packed layouts: hybrid M*-E, TP2 + sequence parallelism", "[tp][packed]") {
  check_layout(packed_hybrid({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}), 2);
}

TEST_CASE("packed layouts: hybrid M*|-E, PP2", "[pipeline][packed]") {
  std::vector<std::string> layout = packed_hybrid({"parallel.pipeline_model_parallel_size=2"});
  std::vector<std::string> base = packed_hybrid({});
  for (auto& o : layout)
    if (o.rfind("model.hybrid_layer_pattern", 0) == 0) o = "model.hybrid_layer_pattern=\"M*|-E\"";
  check_layout(layout, 2, &base);
}

TEST_CASE("packed layouts: MTP, TP2 + sequence parallelism", "[tp][packed]") {
  check_layout(packed({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                       "model.mtp_num_layers=2"}),
               2);
}

TEST_CASE("packed layouts: MTP, PP2", "[pipeline][packed]") {
  check_layout(packed({"parallel.pipeline_model_parallel_size=2", "model.mtp_num_layers=1"}), 2);
}

}  // namespace strata
