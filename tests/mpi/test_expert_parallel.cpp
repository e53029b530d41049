// Expert parallelism under mpirun on 4 CPU ranks ([ep4], ctest mpi_ep_np4): layout equivalence of
// EP2 × DP2, EP4, EP2 × PP2, EP2 × DP2 with the distributed optimizer and EP2 × CP2 against the
// single-rank (EP1) run, each with the all-to-all and the all-gather dispatcher (layout_check.h:
// 10 losses and grad norms within 1e-5, step-1 gradients within 1e-5, every expert on one rank).
// Reference: Megatron-Core transformer/moe/token_dispatcher.py, distributed/
// distributed_data_parallel.py (expert gradients over the expert-data-parallel group, scaled by
// 1 / |dp × cp|), optimizer/optimizer.py (ChainedOptimizer: one grad norm over both groups).
#include <string>
#include <vector>

#include "layout_check.h"

namespace strata {
namespace {

using mpitest::check_layout;

// 8 experts (divisible by ep 2 and 4), top-2, both router losses, MoE in layers 1 and 2.
std::vector<std::string> moe(std::vector<std::string> layout, const char* dispatcher) {
  std::vector<std::string> m = {"model.add_bias_linear=false",      "model.num_experts=8",
                                      "model.moe_ffn_hidden_size=16",     "model.moe_router_topk=2",
                                      "model.moe_aux_loss_coeff=0.01",    "model.moe_z_loss_coeff=0.001",
                                      "model.moe_layer_freq=[0, 1, 1, 0]",
                                      std::string("model.moe_token_dispatcher_type=") + dispatcher};
  std::vector<std::string> all = m;  // the layout's options last: they override the defaults above
  all.insert(all.end(), layout.begin(), layout.end());
  return all;
}

const char* const kDispatchers[] = {"alltoall", "allgather"};

TEST_CASE("expert parallelism: EP2 x DP2 matches EP1", "[ep4]") {
  for (const char* d : kDispatchers) {
    INFO(d);
    check_layout(moe({"parallel.expert_model_parallel_size=2"}, d), 4);
  }
}

TEST_CASE("expert parallelism: EP4 matches EP1", "[ep4]") {
  for (const char* d : kDispatchers) {
    INFO(d);
    check_layout(moe({"parallel.expert_model_parallel_size=4"}, d), 4);
  }
}

TEST_CASE("expert parallelism: EP2 x PP2 matches EP1", "[ep4]") {
  for (const char* d : kDispatchers) {
    INFO(d);
    check_layout(moe({"parallel.expert_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2"}, d), 4);
  }
}

TEST_CASE("expert parallelism: EP2 x DP2 with the distributed optimizer matches EP1", "[ep4]") {
  for (const char* d : kDispatchers) {
    INFO(d);
    check_layout(moe({"parallel.expert_model_parallel_size=2", "parallel.use_distributed_optimizer=true",
                      "model.moe_shared_expert_intermediate_size=16"},
                     d),
                 4);
  }
}

TEST_CASE("expert parallelism: EP2 x CP2 matches EP1", "[ep4]") {
  for (const char* d : kDispatchers) {
    INFO(d);
    check_layout(moe({"parallel.expert_model_parallel_size=2", "parallel.context_parallel_size=2",
                      "model.moe_router_load_balancing_type=seq_aux_loss"},
                     d),
                 4);
  }
}

// Tensor parallelism with sequence parallelism (Megatron requires it for MoE): each tp rank routes
// its sequence shard; the router and shared-expert gate gradients are summed over tp.
TEST_CASE("expert parallelism: EP2 x TP2 (expert_tensor_parallel_size 1) matches EP1", "[ep4]") {
  for (const char* d : kDispatchers) {
    INFO(d);
    check_layout(moe({"parallel.expert_model_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                      "parallel.sequence_parallel=true", "parallel.expert_tensor_parallel_size=1",
                      "model.moe_shared_expert_intermediate_size=16", "model.moe_shared_expert_gate=true"},
                     d),
                 4);
  }
}

// Expert tensor parallelism: each expert split over the expert-tp group (fc1 rows, fc2 columns),
// the group's dispatched rows gathered to every shard and the partial outputs summed back.
TEST_CASE("expert parallelism: EP2 x TP2 (expert_tensor_parallel_size 2) matches EP1", "[ep4]") {
  for (const char* d : kDispatchers) {
    INFO(d);
    check_layout(moe({"parallel.expert_model_parallel_size=2", "parallel.tensor_model_parallel_size=2",
                      "parallel.sequence_parallel=true", "parallel.expert_tensor_parallel_size=2",
                      "model.swiglu=true", "parallel.use_distributed_optimizer=true"},
                     d),
                 4);
  }
}

// (global_aux_loss is not layout-independent by definition: its running token counts after a
// micro-batch hold every dp rank's micro-batches so far, so it is left out of these checks.)
TEST_CASE("expert parallelism: TP2 x DP2 with experts replicated over tp matches EP1", "[ep4]") {
  check_layout(moe({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                    "parallel.expert_tensor_parallel_size=1"},
                   "alltoall"),
               4);
}

// Capacity: each rank drops over-capacity pairs of its own tokens (Megatron: capacity from the
// local tokens), with and without padding every expert block to the capacity.
TEST_CASE("expert parallelism: EP2 x DP2 with capacity and dropping, padded and not, matches EP1", "[ep4]") {
  for (const char* d : kDispatchers)
    for (const char* pad : {"false", "true"}) {
      INFO(d << " pad " << pad);
      check_layout(moe({"parallel.expert_model_parallel_size=2", "model.moe_expert_capacity_factor=1.0",
                        "model.moe_token_drop_policy=position",
                        std::string("model.moe_pad_expert_input_to_capacity=") + pad},
                       d),
                   4);
    }
}

// Per-token loss (calculate_per_token_loss): the router losses' gradient is tokens · cp / global
// tokens (Megatron multiplies the attached loss by the local tokens · |tp × cp|).
TEST_CASE("expert parallelism: EP2 x CP2 with per-token loss matches EP1", "[ep4]") {
  check_layout(moe({"parallel.expert_model_parallel_size=2", "parallel.context_parallel_size=2",
                    "training.calculate_per_token_loss=true"},
                   "alltoall"),
               4);
}

// Sigmoid scores with the expert bias (updated after every step from counts over tp × cp × dp),
// group-limited top-4, probabilities on the input need top-1: here the DeepSeek-style router.
TEST_CASE("expert parallelism: EP4 with a DeepSeek-style router and the expert bias matches EP1", "[ep4]") {
  check_layout(moe({"parallel.expert_model_parallel_size=4", "model.moe_router_score_function=sigmoid",
                    "model.moe_router_enable_expert_bias=true", "model.moe_router_topk=4",
                    "model.moe_router_num_groups=4", "model.moe_router_group_topk=2",
                    "model.moe_router_topk_scaling_factor=2.5", "model.moe_router_load_balancing_type=seq_aux_loss"},
                   "allgather"),
               4);
}

}  // namespace
}  // namespace strata
