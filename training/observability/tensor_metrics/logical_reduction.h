// LogicalReductionMetric's algorithm (Megatron tensor_metrics/core.py) as a function:
// each value of a labelled group is reduced with one ReduceOp over its split axes (Shard,
// FlatShard, Strata's Partial) in relation order, then over its Owned axes — one axis per stage,
// every ready value of every group in the same stage so the executor batches them; placeholders
// contribute the op's identity (0 for Sum, −inf for Max, +inf for Min); Replica axes are skipped.
// Then the group's values are combined elementwise with the same op (they must have one shape)
// and `finalize` turns the combined contribution into results.
// Reference: megatron/training/tensor_metrics/core.py (LogicalReductionMetric,
// _start_logical_reductions).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "training/observability/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics {

struct LabeledValues {
  std::string label;
  std::vector<MetricTensor> values;  // prepared contributions of one shape
};

// combined: the elementwise combination of the group's reduced values (empty when the group has
// no values).
using FinalizeContribution = std::function<std::vector<MetricResult>(const std::string& label,
                                                                      const std::vector<double>& combined)>;

// Which relations a reduction covers. Default: split axes then Owned axes (Megatron's rule).
struct ReductionAxes {
  bool split = true;  // Shard / FlatShard / Partial
  bool owned = true;
};

MetricProgress reduce_logically(std::vector<LabeledValues> groups, ReduceOp op, FinalizeContribution finalize,
                                ReductionAxes axes = {});

// The identity of op (Sum 0, Max −inf, Min +inf).
double reduce_identity(ReduceOp op);
// a ∘ b under op (Sum, Max, Min).
double reduce_pair(ReduceOp op, double a, double b);
// The next axis a value still has to be reduced over under `axes`, or nullopt.
std::optional<Axis> next_reduction_axis(const MetricTensor& v, ReductionAxes axes = {});
// v with its tensor filled with the identity of op when it is a placeholder (else v).
MetricTensor neutral_if_placeholder(MetricTensor v, ReduceOp op);

// Groups values by the layer label of their first site, in natural order of the labels; values
// without a layer label are dropped.
std::vector<LabeledValues> group_by_layer(std::vector<MetricTensor> values);

}  // namespace strata::tensor_metrics
