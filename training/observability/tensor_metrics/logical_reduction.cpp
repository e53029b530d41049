// LogicalReductionMetric's staged reduction.
#include "training/observability/tensor_metrics/logical_reduction.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>

#include "core/error.h"

namespace strata::tensor_metrics {

double reduce_identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return 0.0;
    case ReduceOp::Max: return -std::numeric_limits<double>::infinity();
    case ReduceOp::Min: return std::numeric_limits<double>::infinity();
    case ReduceOp::Avg: break;
  }
  STRATA_CHECK(false, "tensor metrics: no identity for ", reduce_op_name(op));
  return 0.0;
}

double reduce_pair(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::Sum: return a + b;
    case ReduceOp::Max: return std::max(a, b);
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Avg: break;
  }
  STRATA_CHECK(false, "tensor metrics: cannot combine with ", reduce_op_name(op));
  return 0.0;
}

std::optional<Axis> next_reduction_axis(const MetricTensor& v, ReductionAxes axes) {
  if (axes.split)
    for (const RankRelation& r : v.relations)
      if (r.placement.is_split()) return r.axis;
  if (axes.owned)
    for (const RankRelation& r : v.relations)
      if (r.placement.kind == Placement::Kind::Owned) return r.axis;
  return std::nullopt;
}

MetricTensor neutral_if_placeholder(MetricTensor v, ReduceOp op) {
  if (v.placeholder) v.tensor = Tensor::full(v.tensor.shape(), reduce_identity(op), v.tensor.dtype());
  return v;
}

namespace {

struct ReductionState {
  std::vector<LabeledValues> groups;
  ReduceOp op;
  FinalizeContribution finalize;
  ReductionAxes axes;
};

MetricProgress finish(const ReductionState& s) {
  MetricProgress p;
  for (const LabeledValues& g : s.groups) {
    std::vector<double> combined;
    for (const MetricTensor& v : g.values) {
      const std::vector<double> x = v.tensor.to_vector();
      if (combined.empty() && &v == &g.values.front()) {
        combined = x;
        continue;
      }
      STRATA_CHECK(x.size() == combined.size(), "tensor metrics: contributions of ", g.label, " differ in size (",
                   x.size(), " vs ", combined.size(), ")");
      for (size_t i = 0; i < x.size(); ++i) combined[i] = reduce_pair(s.op, combined[i], x[i]);
    }
    for (MetricResult& r : s.finalize(g.label, combined)) p.results.push_back(std::move(r));
  }
  return p;
}

MetricProgress advance(std::shared_ptr<ReductionState> s) {
  CollectiveStage stage;
  std::vector<std::pair<size_t, size_t>> where;
  for (size_t g = 0; g < s->groups.size(); ++g)
    for (size_t i = 0; i < s->groups[g].values.size(); ++i) {
      const MetricTensor& v = s->groups[g].values[i];
      if (std::optional<Axis> a = next_reduction_axis(v, s->axes)) {
        stage.requests.push_back({v, *a, Collective::all_reduce(s->op)});
        where.push_back({g, i});
      }
    }
  if (stage.requests.empty()) return finish(*s);
  stage.resume = [s, where](std::vector<MetricTensor> done) {
    for (size_t k = 0; k < where.size(); ++k) s->groups[where[k].first].values[where[k].second] = std::move(done[k]);
    return advance(s);
  };
  MetricProgress p;
  p.stages.push_back(std::move(stage));
  return p;
}

}  // namespace

MetricProgress reduce_logically(std::vector<LabeledValues> groups, ReduceOp op, FinalizeContribution finalize,
                                ReductionAxes axes) {
  for (LabeledValues& g : groups)
    for (MetricTensor& v : g.values) v = neutral_if_placeholder(std::move(v), op);
  auto s = std::make_shared<ReductionState>(ReductionState{std::move(groups), op, std::move(finalize), axes});
  return advance(s);
}

std::vector<LabeledValues> group_by_layer(std::vector<MetricTensor> values) {
  std::vector<LabeledValues> groups;
  std::map<std::string, size_t> index;
  for (MetricTensor& v : values) {
    const std::optional<std::string> label = layer_label(v.site().name);
    if (!label) continue;
    auto [it, fresh] = index.try_emplace(*label, groups.size());
    if (fresh) groups.push_back({*label, {}});
    groups[it->second].values.push_back(std::move(v));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const LabeledValues& a, const LabeledValues& b) { return natural_less(a.label, b.label); });
  return groups;
}

}  // namespace strata::tensor_metrics
