// Layout equivalence of the combined layouts under mpirun (issue 4): TP2×PP2, TP2×DP2 (with and
// without the distributed optimizer) and PP2×DP2 with the distributed optimizer and tied
// embeddings on 4 ranks, and PP4 in bf16 with an f32 residual stream ([combined4], ctest
// mpi_combined_np4), and
// TP2×PP2×DP2 with sequence parallelism and the distributed optimizer, also with virtual pipeline
// stages, on 8 ranks ([combined8], ctest mpi_combined_np8). The groups are the real ones,
// build_parallel_groups() over MPI_COMM_WORLD in Megatron's tp-cp-ep-dp-pp order, and the run is
// wired as `strata train` wires it (training/run.cpp: model chunks, pipeline layout, mp group,
// dp-ranked batch source, Trainer). Every rank first trains the single-rank baseline locally
// (ParallelGroups::single_process(), no communication), then its part of the layout, and checks:
//   - the 10 losses within 1e-5 relative of the baseline's, and the grad norms within 1e-5;
//   - after step 1, every parameter's gradient (the distributed optimizer's shards all-gathered
//     over dp, the tensor-parallel shards gathered over tp) within 1e-5 of the baseline's, relative
//     to the tensor's largest entry; each parameter lives on exactly one pipeline stage.
// Model: GPT, 4 layers, hidden 32, 4 heads, vocab 128, seq 16, hidden and attention dropout 0.1,
// f32, micro-batch 2, global batch 8 (dp 2: 2 micro-batches per rank; dp 1: 4).
// Reference: Megatron-Core parallel_state.py (the groups), training.py (train_step),
// distributed/finalize_model_grads.py.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "models/gpt/gpt_model.h"
#include "layout_check.h"
#include "layout_training.h"
#include "mpi_test_helpers.h"
#include "parallel/mpi_communicator.h"
#include "parallel/rank_grid.h"
#include "parallel/tensor_parallel.h"
#include "training/batch_source.h"
#include "training/pipeline_setup.h"
#include "training/trainer.h"

namespace strata {
namespace {

using mpitest::check_layout;

TEST_CASE("combined layouts: TP2 x PP2 matches the single-rank run", "[combined4]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2"}, 4);
}

TEST_CASE("combined layouts: TP2 x PP2 with sequence parallelism, untied embeddings", "[combined4]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2",
                "parallel.sequence_parallel=true", "model.untie_embeddings_and_output_weights=true"},
               4);
}

// The tied word embedding is all-reduced over the first and last stage after the distributed
// optimizer's reduce-scatter: both stages must own the same rows of it (its own bucket).
TEST_CASE("combined layouts: PP2 x DP2 with the distributed optimizer, tied embeddings", "[combined4]") {
  check_layout({"parallel.pipeline_model_parallel_size=2", "parallel.use_distributed_optimizer=true"}, 4);
}

// MoE layers (router losses through the loss channel, summed over pipeline stages): the layout
// gives the single-rank losses and gradients.
const std::vector<std::string> kMoe = {"model.add_bias_linear=false", "model.num_experts=4",
                                       "model.moe_ffn_hidden_size=32", "model.moe_router_topk=2",
                                       "model.moe_aux_loss_coeff=0.01", "model.moe_z_loss_coeff=0.001",
                                       "model.moe_layer_freq=[0, 1, 1, 0]"};
std::vector<std::string> with_moe(std::vector<std::string> layout) {
  layout.insert(layout.end(), kMoe.begin(), kMoe.end());
  return layout;
}

TEST_CASE("combined layouts: MoE, PP2 x DP2 with the distributed optimizer", "[combined4]") {
  check_layout(with_moe({"parallel.pipeline_model_parallel_size=2", "parallel.use_distributed_optimizer=true"}), 4);
}

TEST_CASE("combined layouts: MoE with shared experts, DP4", "[combined4]") {
  check_layout(with_moe({"model.moe_shared_expert_intermediate_size=16", "model.moe_shared_expert_gate=true",
                         "model.moe_router_load_balancing_type=seq_aux_loss"}),
               4);
}

// model.fp32_residual_connection in bf16: the stages exchange the f32 stream (the buffers take the
// model's residual dtype), so four pipeline stages give the single-rank bf16 run's losses and
// gradients. (Untied and without dp: a tied embedding's cross-stage sum and a data-parallel sum
// order the f32 gradient additions differently, and bf16 parameters turn those last-bit
// differences into 1e-4 after a few steps.)
TEST_CASE("combined layouts: bf16 with an f32 residual stream, PP4", "[combined4]") {
  check_layout({"parallel.pipeline_model_parallel_size=4", "training.precision=bf16",
                "model.fp32_residual_connection=true", "model.untie_embeddings_and_output_weights=true"},
               4);
}

TEST_CASE("combined layouts: TP2 x DP2 matches the single-rank run", "[combined4]") {
  check_layout({"parallel.tensor_model_parallel_size=2"}, 4);
}

TEST_CASE("combined layouts: TP2 x DP2 with the distributed optimizer and sequence parallelism", "[combined4]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.use_distributed_optimizer=true",
                "parallel.sequence_parallel=true"},
               4);
}

TEST_CASE("combined layouts: TP2 x PP2 x DP2, sequence parallel, distributed optimizer", "[combined8]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2",
                "parallel.sequence_parallel=true", "parallel.use_distributed_optimizer=true"},
               8);
}

TEST_CASE("combined layouts: TP2 x PP2 x DP2 with virtual pipeline stages (VPP2)", "[combined8]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2",
                "parallel.virtual_pipeline_model_parallel_size=2", "parallel.sequence_parallel=true",
                "parallel.use_distributed_optimizer=true"},
               8);
}

// Any layout, for investigating one: STRATA_LAYOUT="parallel.a=1,parallel.b=2" scripts/mpirun.sh -np N
// strata_mpi_tests "[.combined_layout]".
TEST_CASE("combined layouts: the layout in STRATA_LAYOUT", "[.combined_layout]") {
  const char* env = std::getenv("STRATA_LAYOUT");
  REQUIRE(env != nullptr);
  std::vector<std::string> layout;
  std::stringstream ss(env);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) layout.push_back(item);
  check_layout(layout, mpitest::world().size());
}

}  // namespace
}  // namespace strata
