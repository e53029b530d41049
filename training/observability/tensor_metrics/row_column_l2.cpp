// The mean row / column L2 norms (row_column_l2.h): the local norm state, the two-stage chain.
// Reference: Megatron-LM tensor_metrics/definitions.py (_MeanDimwiseL2NormMetric,
// _relations_after_dim_reduction, _flat_shard_dimwise_sum)
#include "training/observability/tensor_metrics/row_column_l2.h"

#include <cmath>

#include "core/error.h"
#include "training/observability/tensor_metrics/local_contribution.h"

namespace strata::tensor_metrics {
namespace {

const Placement* flat_shard_of(const MetricTensor& v) {
  const Placement* found = nullptr;
  for (const RankRelation& r : v.relations)
    if (r.placement.kind == Placement::Kind::FlatShard) {
      STRATA_CHECK(!found, "tensor metrics: ", v.site().name, " has more than one FlatShard relation");
      found = &r.placement;
    }
  return found;
}

std::vector<int64_t> logical_shape(const MetricTensor& v) {
  const Placement* flat = flat_shard_of(v);
  std::vector<int64_t> shape = flat ? flat->logical_shape : v.tensor.shape().vec();
  STRATA_CHECK(!shape.empty(), "tensor metrics: row and column L2 norms need a tensor of at least one dim; ",
               v.site().name, " is a scalar");
  return shape;
}

}  // namespace

std::vector<double> dimwise_sums_of_squares(const MetricTensor& v, bool rows) {
  const std::vector<int64_t> shape = logical_shape(v);
  const int64_t cols = shape.back();
  int64_t nrows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) nrows *= shape[d];
  std::vector<double> out(static_cast<size_t>(rows ? nrows : cols), 0.0);
  if (v.tensor.numel() == 0) return out;
  const Placement* flat = flat_shard_of(v);
  const int64_t first = flat ? flat->start : 0;  // flat index of the local element 0
  STRATA_CHECK(!flat || v.tensor.numel() == flat->end - flat->start, "tensor metrics: ", v.site().name, " holds ",
               v.tensor.numel(), " elements but its FlatShard range [", flat ? flat->start : 0, ", ",
               flat ? flat->end : 0, ") has ", flat ? flat->end - flat->start : 0);
  const std::vector<double> x = v.tensor.to_vector();
  // Element g of the logical flattening sits in row g / cols, column g % cols: a range starting
  // and ending mid-row contributes its partial first and last rows as well as its full rows.
  for (size_t k = 0; k < x.size(); ++k) {
    const int64_t g = first + static_cast<int64_t>(k);
    out[static_cast<size_t>(rows ? g / cols : g % cols)] += x[k] * x[k];
  }
  return out;
}

namespace {

// One value's branch: its norm stage (the Partial axes left by prepare), then its population stage.
struct Branch {
  MetricTensor value;
  std::vector<Axis> axes;  // still to reduce in this stage
  bool population = false;
  bool done = false;
};

std::vector<Axis> axes_of(const MetricTensor& v, bool partial_only) {
  std::vector<Axis> axes;
  for (const RankRelation& r : v.relations)
    if (partial_only ? r.placement.kind == Placement::Kind::Partial : r.placement.is_split()) axes.push_back(r.axis);
  if (!partial_only)
    for (const RankRelation& r : v.relations)
      if (r.placement.kind == Placement::Kind::Owned) axes.push_back(r.axis);
  return axes;
}

// RESOLVE_NORM's local part: v's row (column) sums of squares; an axis that splits a normed dim
// (FlatShard, Shard on a normed dim) becomes Partial — each rank holds an additive part of the
// sums — and a Shard on a kept dim a Shard of the norm vector (a population split).
MetricTensor local_norm_state(const MetricTensor& v, bool rows) {
  STRATA_CHECK(!has_partial(v), "tensor metrics: row and column L2 norms do not take Partial values (", v.site().name, ")");
  const int ndim = static_cast<int>(logical_shape(v).size());
  MetricTensor out = v.with_tensor(contribution_tensor(dimwise_sums_of_squares(v, rows), v.tensor.dtype()));
  for (RankRelation& r : out.relations) {
    if (r.placement.kind == Placement::Kind::FlatShard) {
      r.placement = Placement::partial();
    } else if (r.placement.kind == Placement::Kind::Shard) {
      STRATA_CHECK(r.placement.dim.has_value(), "tensor metrics: row and column L2 norms need the dim of every Shard; ",
                   v.site().name, " has Shard(None) on ", axis_name(r.axis));
      const int dim = *r.placement.dim < 0 ? *r.placement.dim + ndim : *r.placement.dim;
      STRATA_CHECK(dim >= 0 && dim < ndim, "tensor metrics: ", v.site().name, ": Shard dim ", *r.placement.dim,
                   " outside a tensor of ", ndim, " dims");
      const bool normed = rows ? dim == ndim - 1 : dim < ndim - 1;
      r.placement = normed ? Placement::partial() : Placement::shard(rows ? dim : 0);
    }
  }
  return out;
}

// A branch whose stage has no axis left moves on: √ of the complete sums, then [Σ norms, count]
// for the population stage.
void settle(Branch& b) {
  while (b.axes.empty() && !b.done) {
    if (b.population) {
      b.done = true;
      return;
    }
    double total = 0.0, count = 0.0;
    if (b.value.tensor.numel() > 0)
      for (double s : b.value.tensor.to_vector()) total += std::sqrt(s), count += 1.0;
    b.value = b.value.with_tensor(contribution_tensor({total, count}, b.value.tensor.dtype()));
    b.population = true;
    b.axes = axes_of(b.value, false);
  }
}

MetricProgress finish(const std::vector<Branch>& branches) {
  double total = 0.0, count = 0.0;
  for (const Branch& b : branches) {
    const std::vector<double> c = b.value.tensor.to_vector();
    total += c[0], count += c[1];
  }
  MetricProgress p;
  if (!branches.empty()) p.results.push_back({count > 0 ? total / count : 0.0, "global"});
  return p;
}

MetricProgress advance(std::shared_ptr<std::vector<Branch>> s) {
  CollectiveStage stage;
  std::vector<size_t> where;
  for (size_t i = 0; i < s->size(); ++i) {
    Branch& b = (*s)[i];
    settle(b);
    if (b.done) continue;
    stage.requests.push_back({b.value, b.axes.front(), Collective::all_reduce(ReduceOp::Sum)});
    b.axes.erase(b.axes.begin());
    where.push_back(i);
  }
  if (stage.requests.empty()) return finish(*s);
  stage.resume = [s, where](std::vector<MetricTensor> done) {
    for (size_t k = 0; k < where.size(); ++k) (*s)[where[k]].value = std::move(done[k]);
    return advance(s);
  };
  MetricProgress p;
  p.stages.push_back(std::move(stage));
  return p;
}

class MeanDimwiseL2 : public TensorMetric {
 public:
  MeanDimwiseL2(std::string name, std::string kind, bool rows) : name_(std::move(name)), kind_(std::move(kind)), rows_(rows) {}
  std::string name() const override { return name_; }
  std::vector<std::string> source_kinds() const override { return {kind_}; }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    for (MetricTensor& v : values) v = local_norm_state(v, rows_);
    return values;
  }
  MetricProgress start(std::vector<MetricTensor> prepared) const override {
    auto s = std::make_shared<std::vector<Branch>>();
    for (const MetricTensor& v : prepared) {
      if (v.placeholder) {  // straight to the population stage, as [0, 0] over every axis
        MetricTensor zero = v.with_tensor(contribution_tensor({0.0, 0.0}, v.tensor.dtype()));
        s->push_back({zero, axes_of(zero, false), true, false});
      } else {
        s->push_back({v, axes_of(v, true), false, false});
      }
    }
    return advance(s);
  }

 private:
  std::string name_, kind_;
  bool rows_;
};

}  // namespace

std::unique_ptr<TensorMetric> make_mean_dimwise_l2(std::string name, std::string kind, bool rows) {
  return std::make_unique<MeanDimwiseL2>(std::move(name), std::move(kind), rows);
}

}  // namespace strata::tensor_metrics
