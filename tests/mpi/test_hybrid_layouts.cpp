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

// `pattern` (with '|') in the layout run, `flat` (the same layers) in the single-rank baseline;
// `extra`: both runs, except its parallel.* settings (the layout run's only).
void check_hybrid(const std::string& pattern, const std::string& flat, const std::vector<std::string>& extra) {
  const std::vector<std::string> layout = with_pattern(pattern, extra);
  std::vector<std::string> model_only;
  for (const auto& o : extra)
    if (o.rfind("parallel.", 0) != 0) model_only.push_back(o);
  const std::vector<std::string> baseline = with_pattern(flat, model_only);
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

const std::vector<std::string> kMamba = {"model.mamba_head_dim=16", "model.mamba_num_groups=2",
                                         "model.mamba_state_dim=8", "model.mamba_chunk_size=8"};

TEST_CASE("hybrid layouts: PP2 with Mamba layers in both segments matches", "[pipeline]") {
  check_hybrid("M*|EM", "M*EM", [] {
    std::vector<std::string> o = kMamba;
    o.push_back("parallel.pipeline_model_parallel_size=2");
    return o;
  }());
}

TEST_CASE("hybrid layouts: TP2 + SP with Mamba layers (heads and groups split) matches", "[tp]") {
  std::vector<std::string> o = kMamba;
  o.push_back("parallel.tensor_model_parallel_size=2");
  o.push_back("parallel.sequence_parallel=true");
  check_hybrid("M*EM-", "M*EM-", o);
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
