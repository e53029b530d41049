// Multi-token prediction under tensor parallelism (ctest mpi_tp_np2, 2 ranks): the MTP heads'
// eh_proj column-parallel (output gathered over tp; with sequence parallelism its input gathered
// along the sequence and its output scattered back), the vocab-parallel MTP embedding lookup and
// output heads; layout equivalence against the single-rank run (mpitest::check_layout: 10 losses
// and grad norms within 1e-5 relative, every gradient after step 1 within 1e-5). The PP2 case is in
// test_pipeline_parallel.cpp. Reference: megatron/core/transformer/multi_token_prediction.py
// (_concat_embeddings).
#include "layout_check.h"

namespace strata {
namespace {

using mpitest::check_layout;

TEST_CASE("mtp layouts: TP2 with MTP heads matches the single-rank run", "[tp][mtp]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "model.position_embedding_type=rope", "model.mtp_num_layers=2"},
               2);
}

TEST_CASE("mtp layouts: TP2 + sequence parallelism, untied, MTP heads", "[tp][mtp]") {
  check_layout({"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                "model.position_embedding_type=rope", "model.mtp_num_layers=1",
                "model.untie_embeddings_and_output_weights=true"},
               2);
}

}  // namespace
}  // namespace strata
