// `strata plan`'s parameter counts per rank (training/planning/memory_plan.h, from the model manifest) against
// the model each rank builds under mpirun: hybrid models with Mamba, attention, MLP and MoE layers
// under TP2 (+ SP; heads and groups split, norms replicated) and PP2 with uneven `|` segments and
// MTP depths on the last stage — the plan's stage count equals the numel sum of the rank's
// parameters exactly. ctest mpi_tp_np2 ([tp]) and mpi_pipeline_np2 ([pipeline]).
// Reference: megatron/core/ssm/mamba_mixer.py (tp split), hybrid_layer_allocation.py (segments).
#include <string>
#include <vector>

#include "layout_check.h"
#include "training/planning/memory_plan.h"
#include "training/config/model_factory.h"

namespace strata {
namespace {

const std::vector<std::string> kHybrid = {"model.num_experts=4",        "model.moe_ffn_hidden_size=16",
                                          "model.add_bias_linear=false", "model.moe_aux_loss_coeff=0.01",
                                          "model.position_embedding_type=rope", "model.mamba_head_dim=8",
                                          "model.mamba_num_groups=2",    "model.mamba_state_dim=8",
                                          "model.mamba_chunk_size=8"};

// The plan's parameters for this rank's stage, and the numel sum of the parameters it builds.
void check_rank_parameters(std::vector<std::string> extra) {
  extra.insert(extra.begin(), kHybrid.begin(), kHybrid.end());
  const int world = mpitest::world().size();
  const ResolvedConfig cfg = mpitest::layout_config(extra, world);
  const ParallelGroups groups = build_parallel_groups(*cfg.parallel, mpitest::world_comm());
  int64_t built = 0;
  for (auto& chunk : make_model_chunks(cfg, Device::cpu(), groups))
    for (Parameter* p : chunk->parameters()) built += p->value.numel();
  const LayoutPlan plan = plan_layout(cfg);
  const int64_t planned = plan.stages.at(static_cast<size_t>(groups.pp.rank())).parameters.total();
  INFO("rank " << mpitest::world().rank() << " pp rank " << groups.pp.rank());
  CHECK(planned == built);
}

}  // namespace

TEST_CASE("plan layouts: TP2 hybrid parameters per rank equal the built model's", "[tp]") {
  check_rank_parameters({"model.hybrid_layer_pattern=\"M*EM-\"", "parallel.tensor_model_parallel_size=2",
                         "parallel.sequence_parallel=true"});
  check_rank_parameters({"model.hybrid_layer_pattern=\"M*-M\"", "parallel.tensor_model_parallel_size=2",
                         "parallel.sequence_parallel=true", "model.normalization=RMSNorm", "model.swiglu=true",
                         "model.ffn_hidden_size=64"});
  check_rank_parameters({"model.hybrid_layer_pattern=\"M*E-/M-\"", "parallel.tensor_model_parallel_size=2",
                         "parallel.sequence_parallel=true", "model.untie_embeddings_and_output_weights=true"});
}

TEST_CASE("plan layouts: PP2 hybrid with uneven | segments and MTP, per stage", "[pipeline]") {
  check_rank_parameters({"model.hybrid_layer_pattern=\"M*|EM-\"", "parallel.pipeline_model_parallel_size=2"});
  check_rank_parameters({"model.hybrid_layer_pattern=\"M*|EM-/M*\"", "parallel.pipeline_model_parallel_size=2",
                         "model.untie_embeddings_and_output_weights=true"});
}

}  // namespace strata
