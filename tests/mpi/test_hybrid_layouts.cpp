// Hybrid models (`*`, `-`, `E` layers) under mpirun, layout equivalence against the single-rank run
// (tests/mpi/layout_check.h: 10 losses and grad norms within 1e-5 relative, step-1 gradients
// within 1e-5, every parameter on exactly one stage): PP2 with '|' segments (uneven: 2 and 3
// layers), PP2 with the even split of a pattern without '|', PP2 × VPP2 derived from four '|'
// segments (ctest mpi_pipeline_np2, [pipeline]); TP2 + sequence parallelism (mpi_tp_np2, [tp]);
// CP2 (mpi_cp_np2, [cp]); DP2 (mpi_np2, [mpi]). The baseline runs the pattern without its '|' on one rank.
// Reference: megatron/core/models/hybrid/hybrid_layer_allocation.py (select_pipeline_segment).
#include <string>
#include <vector>

#include "layout_check.h"

namespace strata {
namespace {

const std::vector<std::string> kMoe = {"model.num_experts=4", "model.moe_ffn_hidden_size=16",
                                       "model.add_bias_linear=false", "model.moe_aux_loss_coeff=0.01",
                                       "model.position_embedding_type=rope"};

std::vector<std::string> with_pattern(const std::string& pattern, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = kMoe;
  o.push_back("model.hybrid_layer_pattern=\"" + pattern + "\"");
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

// `pattern` (with '|') in the layout run, `flat` (the same layers) in the single-rank baseline.
void check_hybrid(const std::string& pattern, const std::string& flat, const std::vector<std::string>& parallel) {
  const std::vector<std::string> layout = with_pattern(pattern, parallel);
  const std::vector<std::string> baseline = with_pattern(flat);
  mpitest::check_layout(layout, mpitest::world().size(), &baseline);
}

}  // namespace

TEST_CASE("hybrid layouts: PP2 with '|' segments matches the single-rank run", "[pipeline]") {
  check_hybrid("*-|E*-", "*-E*-", {"parallel.pipeline_model_parallel_size=2"});
}

TEST_CASE("hybrid layouts: PP2 even split of a pattern without '|' matches", "[pipeline]") {
  check_hybrid("*-E*", "*-E*", {"parallel.pipeline_model_parallel_size=2"});
}

TEST_CASE("hybrid layouts: PP2 x VPP2 from four '|' segments matches", "[pipeline]") {
  check_hybrid("*|-E|*-|-*", "*-E*--*", {"parallel.pipeline_model_parallel_size=2"});
}

TEST_CASE("hybrid layouts: TP2 + sequence parallelism matches", "[tp]") {
  check_hybrid("*-E*-", "*-E*-", {"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"});
}

TEST_CASE("hybrid layouts: CP2 (attention layers exchange K/V, the others are per token) matches", "[cp]") {
  check_hybrid("*-E*-", "*-E*-", {"parallel.context_parallel_size=2"});
}

TEST_CASE("hybrid layouts: DP2 matches", "[mpi]") {
  if (mpitest::world().size() != 2) return;
  check_hybrid("*-E*-", "*-E*-", {});
}

}  // namespace strata
