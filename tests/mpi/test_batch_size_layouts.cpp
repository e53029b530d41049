// Megatron's step batch-size schedule under the layouts that change who runs which micro-batch:
// the schedule 0:4, 12 samples:8, 40 samples:12 (thresholds in tokens at seq_length 16) gives 10
// steps of 4 4 4 8 8 8 8 12 12 12 samples, so each layout's number of micro-batches per rank
// changes twice; the layout's losses, grad norms and step-1 gradients match the single-rank run
// (mpitest::check_layout, 1e-5). DP2 (with and without the distributed optimizer), TP2 + SP, CP2
// and PP2. The learning rate is constant: Megatron's iteration-based lengths scale with
// global_batch_size, which a step schedule leaves at micro_batch_size × dp (docs/config.md).
#include "layout_check.h"

namespace strata {
namespace {

using mpitest::check_layout;

std::vector<std::string> scheduled(std::vector<std::string> extra) {
  for (const char* o : {"training.global_batch_size=null", "training.step_batch_size_schedule=0:4 192:8 640:12",
                        "optimizer.lr_warmup_iters=0", "optimizer.lr_decay_style=constant"})
    extra.push_back(o);
  return extra;
}

}  // namespace

TEST_CASE("batch-size schedule layouts: DP2", "[batch_size2]") {
  check_layout(scheduled({}), 2);
}

TEST_CASE("batch-size schedule layouts: DP2, distributed optimizer", "[batch_size2]") {
  check_layout(scheduled({"parallel.use_distributed_optimizer=true"}), 2);
}

TEST_CASE("batch-size schedule layouts: TP2 + sequence parallelism", "[batch_size2]") {
  check_layout(scheduled({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}), 2);
}

TEST_CASE("batch-size schedule layouts: CP2", "[batch_size2]") {
  check_layout(scheduled({"parallel.context_parallel_size=2"}), 2);
}

TEST_CASE("batch-size schedule layouts: PP2", "[batch_size2]") {
  check_layout(scheduled({"parallel.pipeline_model_parallel_size=2"}), 2);
}

}  // namespace strata
