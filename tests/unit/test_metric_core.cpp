// The tensor-metric framework (training/observability/tensor_metrics/metric_core.h, logical_reduction.h) over
// in-process ranks: a sum-of-squares metric on every placement kind equals the float64 value of
// the gathered tensor; Owned values become placeholders on the other ranks; requests of several
// values and metrics travel in one collective per (axis, op, dtype).
#include <catch2/catch.hpp>
#include <cmath>

#include "tests/unit/metric_test_ranks.h"

using namespace strata;
using namespace strata::tensor_metrics;
using namespace strata::tensor_metrics::test;
using Catch::Matchers::WithinRel;

namespace {

// Σx² with one result per layer label and "global" (a test metric; the real ones are in
// training/observability/tensor_metrics/).
class SumSquares : public TensorMetric {
 public:
  explicit SumSquares(ReduceOp op = ReduceOp::Sum) : op_(op) {}
  std::string name() const override { return "test-sum-squares"; }
  std::vector<std::string> source_kinds() const override { return {"parameter"}; }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    for (MetricTensor& v : values) {
      double s = op_ == ReduceOp::Sum ? 0.0 : reduce_identity(op_);
      for (double x : v.tensor.to_vector()) s = op_ == ReduceOp::Sum ? s + x * x : reduce_pair(op_, s, x);
      v.tensor = Tensor::from_vector({s}, {1}, DType::F64);
    }
    return values;
  }
  MetricProgress start(std::vector<MetricTensor> prepared) const override {
    std::vector<LabeledValues> groups = group_by_layer(prepared);
    groups.push_back({"global", prepared});
    return reduce_logically(std::move(groups), op_, [](const std::string& label, const std::vector<double>& c) {
      return std::vector<MetricResult>{{c.empty() ? 0.0 : c[0], label}};
    });
  }

 private:
  ReduceOp op_;
};

// A global [rows, cols] tensor with values 1..n / 7.
std::vector<double> global_values(int64_t n) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(i + 1) / 7.0 - 0.5);
  return v;
}

double sum_squares(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

MetricTensor value(const std::string& name, const std::vector<double>& x, std::vector<RankRelation> rel) {
  MetricTensor v;
  v.tensor = Tensor::from_vector(x, {static_cast<int64_t>(x.size())}, DType::F32);
  v.sites = {{name, "parameter"}};
  v.relations = std::move(rel);
  return v;
}

}  // namespace

TEST_CASE("tensor metrics core: Shard over tp, FlatShard over dp, Owned over pp reduce to the gathered sum",
          "[tensor_metrics]") {
  // 8 ranks: tp 2 × dp 2 × pp 2. Layer 0 lives on pp stage 0, layer 1 on stage 1; each layer's
  // [4, 6] weight is split over tp by rows, then each tp shard ([2, 6] = 12 elements) is split
  // over dp as flat ranges [0, 5) and [5, 12).
  const RankGrid grid({{Axis::TP, 2}, {Axis::DpCp, 2}, {Axis::PP, 2}});
  const std::vector<double> w0 = global_values(24), w1 = global_values(24 * 2);  // layer 1 is [4, 12]
  auto results = run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    const int tp = grid.coord(rank, Axis::TP), dp = grid.coord(rank, Axis::DpCp), pp = grid.coord(rank, Axis::PP);
    const std::vector<double>& w = pp == 0 ? w0 : w1;
    const int64_t shard = static_cast<int64_t>(w.size()) / 2;
    const int64_t cut = pp == 0 ? 5 : 0;  // stage 1: dp rank 0 owns nothing (an empty FlatShard)
    const int64_t start = dp == 0 ? 0 : cut, end = dp == 0 ? cut : shard;
    std::vector<double> mine(w.begin() + tp * shard + start, w.begin() + tp * shard + end);
    MetricTensor v = value("decoder.layers." + std::to_string(pp) + ".mlp.linear_fc1.weight", mine,
                           {{Axis::TP, Placement::shard(0)},
                            {Axis::DpCp, Placement::flat_shard({2, shard / 2}, start, end)},
                            {Axis::PP, Placement::owned(pp)}});
    SumSquares metric;
    MetricExecutor exec(runner);
    std::vector<std::vector<MetricTensor>> prepared = {exec.prepare(metric, {v})};
    exec.synchronize_owned(prepared, {Axis::PP});
    const size_t held = prepared[0].size();
    auto r = exec.run({&metric}, std::move(prepared));
    return std::make_tuple(r[0], held, exec.collectives_issued());
  });
  for (const auto& [r, held, collectives] : results) {
    CHECK(held == 2);  // its own value and the other stage's placeholder
    REQUIRE(r.size() == 3);
    CHECK(r[0].label == "decoder.layers.0");
    CHECK_THAT(r[0].value, WithinRel(sum_squares(w0), 1e-6));
    CHECK(r[1].label == "decoder.layers.1");
    CHECK_THAT(r[1].value, WithinRel(sum_squares(w1), 1e-6));
    CHECK(r[2].label == "global");
    CHECK_THAT(r[2].value, WithinRel(sum_squares(w0) + sum_squares(w1), 1e-6));
    // One descriptor exchange over pp, then one all-reduce per axis (tp, dp, pp) for all six
    // values (two labels' worth per rank, batched).
    CHECK(collectives == 4);
  }
}

TEST_CASE("tensor metrics core: Partial sums and Max over Shard(None) with placeholders as identities",
          "[tensor_metrics]") {
  const RankGrid grid({{Axis::CP, 2}, {Axis::DP, 2}, {Axis::EP, 2}});
  auto results = run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    const int cp = grid.coord(rank, Axis::CP), dp = grid.coord(rank, Axis::DP), ep = grid.coord(rank, Axis::EP);
    // Every rank observes a part of the same site; ep rank 1 also holds an expert value.
    std::vector<MetricTensor> vs;
    vs.push_back(value("decoder.layers.2.residual_contribution", {-3.0 - rank, 0.5 * cp, 1.0 * dp},
                       {{Axis::CP, Placement::partial()}, {Axis::DP, Placement::shard(std::nullopt)}}));
    if (ep == 1)
      vs.push_back(value("decoder.layers.2.mlp.experts.linear_fc1.weight3", {10.0 + dp + cp},
                         {{Axis::CP, Placement::shard(std::nullopt)}, {Axis::DP, Placement::shard(std::nullopt)}, {Axis::EP, Placement::owned(1)}}));
    SumSquares metric(ReduceOp::Max);
    MetricExecutor exec(runner);
    std::vector<std::vector<MetricTensor>> prepared = {exec.prepare(metric, vs)};
    exec.synchronize_owned(prepared, {Axis::EP});
    return exec.run({&metric}, std::move(prepared))[0];
  });
  for (const auto& r : results) {
    REQUIRE(r.size() == 2);
    CHECK(r[0].label == "decoder.layers.2");
    CHECK(r[0].value == 12.0f);  // the expert on (dp 1, cp 1)
    CHECK(r[1].value == 12.0f);
  }
}

TEST_CASE("tensor metrics core: all-gather stacks or concatenates in rank order", "[tensor_metrics]") {
  class Gather : public TensorMetric {
   public:
    std::string name() const override { return "test-gather"; }
    std::vector<std::string> source_kinds() const override { return {"parameter"}; }
    MetricProgress start(std::vector<MetricTensor> prepared) const override {
      CollectiveStage s;
      s.requests.push_back({prepared[0], Axis::TP, Collective::all_gather()});
      s.requests.push_back({prepared[0], Axis::TP, Collective::all_gather(0)});
      s.resume = [](std::vector<MetricTensor> done) {
        MetricProgress p;
        CHECK(done[0].tensor.shape() == Shape({2, 2}));
        CHECK(done[1].tensor.shape() == Shape({4}));
        const std::vector<double> a = done[0].tensor.to_vector(), b = done[1].tensor.to_vector();
        for (size_t i = 0; i < 4; ++i) p.results.push_back({a[i] * 10 + b[i], "x" + std::to_string(i)});
        return p;
      };
      MetricProgress p;
      p.stages.push_back(std::move(s));
      return p;
    }
  };
  const RankGrid grid({{Axis::TP, 2}});
  auto results = run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    Gather metric;
    MetricExecutor exec(runner);
    std::vector<std::vector<MetricTensor>> prepared = {
        exec.prepare(metric, {value("w", {1.0 + 2 * rank, 2.0 + 2 * rank}, {{Axis::TP, Placement::shard(0)}})})};
    auto r = exec.run({&metric}, std::move(prepared))[0];
    return std::make_pair(r, exec.collectives_issued());
  });
  for (const auto& [r, n] : results) {
    REQUIRE(r.size() == 4);
    for (size_t i = 0; i < 4; ++i) CHECK(r[i].value == 11.0 * static_cast<double>(i + 1));
    CHECK(n == 1);  // both requests in one all-gather
  }
}

TEST_CASE("tensor metrics core: natural order and placements", "[tensor_metrics]") {
  CHECK(natural_less("decoder.layers.2.x", "decoder.layers.10.x"));
  CHECK_FALSE(natural_less("decoder.layers.10.x", "decoder.layers.2.x"));
  CHECK(natural_less("a", "ab"));
  CHECK(placement_text(Placement::flat_shard({2, 3}, 1, 4)) == "FlatShard([2,3],1,4)");
  CHECK(placement_text(Placement::shard(std::nullopt)) == "Shard(None)");
  CHECK_THROWS_WITH(Placement::flat_shard({2, 3}, 2, 7), Catch::Contains("FlatShard range"));
  MetricTensor v;
  v.placeholder = true;
  v.relations = {{Axis::PP, Placement::owned(1)}};
  CHECK_FALSE(v.with_placement(Axis::PP, Placement::replica()).placeholder);
}
