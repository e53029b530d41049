// Under mpirun, every rank a data-parallel replica (dp = world): the weight-hash check across replicas
// (training/weight_hash_check.h; Megatron --check-weight-hash-across-dp-replicas-interval) passes on
// equal parameters and names the one a rank changed, on that rank, while every rank stops; and the
// straggler detector (training/observability/straggler_detector.h; Megatron --log-straggler) names
// the rank whose compute time is made the largest and the smallest.
#include <string>

#include "mpi_test_helpers.h"
#include "parallel/rank_grid.h"
#include "training/config/config.h"
#include "training/observability/straggler_detector.h"
#include "training/weight_hash_check.h"

namespace strata {
namespace {

using Catch::Matchers::Contains;

ParallelGroups data_parallel_groups() {
  const StrataConfig cfg = StrataConfig::from_yaml_text(
      "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n  hidden_size: 16\n"
      "  num_attention_heads: 4\n  seq_length: 16\n",
      {}, "replica_checks.yaml");
  return build_parallel_groups(*cfg.validate(mpitest::world().size()).parallel, mpitest::world_comm());
}

struct Params {
  std::vector<Parameter> owned;
  std::vector<Parameter*> ptrs;
  explicit Params(int n) : owned(static_cast<size_t>(n)) {
    for (int i = 0; i < n; ++i) {
      Parameter& p = owned[static_cast<size_t>(i)];
      p.name = "decoder.layers." + std::to_string(i) + ".mlp.linear_fc1.weight";
      p.value = mpitest::rank_tensor(/*rank=*/0, 6, i % 2 ? DType::BF16 : DType::F32, i);  // equal on every rank
      ptrs.push_back(&p);
    }
  }
};

TEST_CASE("weight hash check: equal replicas pass, a changed parameter is named on its rank", "[mpi]") {
  const ParallelGroups g = data_parallel_groups();
  REQUIRE(g.dp.size() == mpitest::world().size());
  Params params(3);
  CHECK(weight_hash_differences(params.ptrs, g).empty());
  CHECK_NOTHROW(check_weight_hashes_across_replicas(params.ptrs, g, 5));

  const int last = g.world.size() - 1;
  if (g.global_rank == last) {  // one element of one bf16 parameter, 4 -> 4.5
    std::vector<double> v = params.owned[1].value.to_vector();
    v[2] += 0.5;
    params.owned[1].value = Tensor::from_vector(v, {6}, DType::BF16);
  }
  const std::vector<std::string> differ = weight_hash_differences(params.ptrs, g);
  if (g.global_rank == last)
    CHECK(differ == std::vector<std::string>{"decoder.layers.1.mlp.linear_fc1.weight"});
  else
    CHECK(differ.empty());
  // Every rank stops; the changed rank names the parameter and the iteration.
  if (g.global_rank == last)
    CHECK_THROWS_WITH(check_weight_hashes_across_replicas(params.ptrs, g, 7),
                      Contains("after 7 iterations") && Contains("decoder.layers.1.mlp.linear_fc1.weight"));
  else
    CHECK_THROWS_WITH(check_weight_hashes_across_replicas(params.ptrs, g, 7), Contains("on another rank"));
}

TEST_CASE("straggler detector: the ranks' times gathered, the slowest and fastest named", "[mpi]") {
  const ParallelGroups g = data_parallel_groups();
  const int n = g.world.size();
  StragglerDetector d(g.world, /*minmax_count=*/2, /*enabled=*/true, std::nullopt);
  // Rank r computes (10 + 3·((r + 1) mod n)) ms per iteration over 2 iterations: rank n−2 is the
  // slowest, rank n−1 the fastest.
  const double ms = 10.0 + 3.0 * ((g.global_rank + 1) % n);
  d.add(ms / 1000.0);
  d.add(ms / 1000.0);
  const std::vector<std::string> lines = d.report(2);
  REQUIRE(!lines.empty());
  const auto text = [](int rank, double t) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f (rank %d)", t, rank);
    return std::string(buf);
  };
  CHECK_THAT(lines[0], Contains("max " + text(n - 2, 10.0 + 3.0 * (n - 1))) && Contains("min " + text(n - 1, 10.0)));
  CHECK(lines.size() == (n > 2 ? 2u : 1u));  // the lists only for 1 < count < world
}

}  // namespace
}  // namespace strata
