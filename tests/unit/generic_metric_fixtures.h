// Fixtures for the generic tensor-metric tests (test_generic_metrics*.cpp): metrics by registered
// name, deterministic global tensors cut into local pieces (nested Shard splits, FlatShard ranges),
// and a runner that prepares, synchronises the Owned axes and runs one metric on in-process ranks
// (metric_test_ranks.h), returning every rank's results for checks on the main thread.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/metric_test_ranks.h"
#include "training/observability/tensor_metrics/generic_metrics.h"

namespace strata::tensor_metrics::test {

inline std::unique_ptr<TensorMetric> make_metric(const std::string& name) {
  for (const MetricFactory& f : generic_metric_factories())
    if (f.name == name) return f.make();
  throw std::runtime_error("no generic metric " + name);
}

// n values in [-2, 2), exactly representable in f32, varied by `salt`.
inline std::vector<double> global_values(int64_t n, double salt) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(static_cast<float>(2.0 * std::sin(1.7 * static_cast<double>(i) + salt))));
  return v;
}

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A box of a row-major tensor: start and length per dim.
struct Box {
  std::vector<int64_t> start, len;
};

// The values of g (shape `shape`) inside box b, row-major.
inline std::vector<double> box_values(const std::vector<double>& g, const std::vector<int64_t>& shape, const Box& b) {
  std::vector<double> out;
  const size_t nd = shape.size();
  std::vector<int64_t> idx(nd, 0);
  if (numel(b.len) == 0) return out;
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < nd; ++d) flat = flat * shape[d] + b.start[d] + idx[d];
    out.push_back(g[static_cast<size_t>(flat)]);
    size_t d = nd;
    while (d > 0 && ++idx[d - 1] == b.len[d - 1]) idx[--d] = 0;
    if (d == 0) return out;
  }
}

// One nested split: dim `dim` of the current box cut into `sizes` along `axis`.
struct Split {
  Axis axis;
  int dim;
  std::vector<int64_t> sizes;
};

// The box of `rank` after applying the splits in order (each split's sizes sum to the current length).
inline Box local_box(const RankGrid& grid, int rank, const std::vector<int64_t>& shape, const std::vector<Split>& splits) {
  Box b{std::vector<int64_t>(shape.size(), 0), shape};
  for (const Split& s : splits) {
    const int k = grid.coord(rank, s.axis);
    int64_t off = 0, total = 0;
    for (int i = 0; i < k; ++i) off += s.sizes[static_cast<size_t>(i)];
    for (int64_t x : s.sizes) total += x;
    if (total != b.len[static_cast<size_t>(s.dim)]) throw std::runtime_error("split sizes do not cover the dim");
    b.start[static_cast<size_t>(s.dim)] += off;
    b.len[static_cast<size_t>(s.dim)] = s.sizes[static_cast<size_t>(k)];
  }
  return b;
}

inline MetricTensor metric_value(const std::string& name, const std::string& kind, const std::vector<double>& x,
                                 std::vector<int64_t> shape, std::vector<RankRelation> rel, int64_t occurrence = 0,
                                 int64_t order = 0) {
  MetricTensor v;
  v.tensor = Tensor::from_vector(x, Shape(shape), DType::F32);
  v.sites = {{name, kind}};
  v.relations = std::move(rel);
  v.occurrence = occurrence;
  v.order = order;
  return v;
}

struct RankOut {
  std::vector<MetricResult> results;
  int64_t collectives = 0;
};

// Prepares values_for(rank) for the metric, synchronises `owned` axes, runs it; every rank's results.
template <typename F>
std::vector<RankOut> run_metric(const RankGrid& grid, const std::string& name, F values_for,
                                std::vector<Axis> owned = {Axis::EP, Axis::PP}) {
  return run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    std::unique_ptr<TensorMetric> metric = make_metric(name);
    MetricExecutor exec(runner);
    std::vector<std::vector<MetricTensor>> prepared = {exec.prepare(*metric, values_for(rank))};
    exec.synchronize_owned(prepared, owned);
    RankOut out;
    out.results = exec.run({metric.get()}, std::move(prepared))[0];
    out.collectives = exec.collectives_issued();
    return out;
  });
}

inline double sum_squares(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

}  // namespace strata::tensor_metrics::test
