// Local compaction shared by the generic metrics (generic_metrics.h, sampled_median.h,
// row_column_l2.h): reductions of one observed tensor on its own device (Σx² in the
// accumulation dtype, max exact; only a scalar comes back to the host), and Strata's Partial placement resolved
// before a non-additive contribution is formed.
//
// Partial (an additive part of one logical tensor on each rank of the axis) cannot be compacted
// locally for Σx², max, entropy, a sample or a row norm: the contribution of a sum is not the sum
// of the contributions. prepare_contributions() therefore keeps such values as host copies, and
// resolve_partials() first all-reduces them (SUM of the tensor) over each Partial axis, then forms
// their contribution; every other value is compacted at once. Decided from relations only, so
// every rank issues the same requests.
// Reference: Megatron-LM tensor_metrics/definitions.py (L2NormMetric.contribution, LayerMaxMetric,
// _accumulation_dtype)
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "training/observability/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics {

// Σx² of t (any device, float or integer), accumulated in the accumulation dtype (f32 for f32 and
// narrower floats, f64 for f64; integers on the host in f64); 0 when empty.
double local_sum_of_squares(const Tensor& t);
// The largest element (signed); −inf when empty, NaN when any element is NaN.
double local_max(const Tensor& t);
// The number of non-finite (NaN or ±inf) elements.
int64_t local_nonfinite_count(const Tensor& t);
// A host tensor [values…] in the accumulation dtype of `like`.
Tensor contribution_tensor(const std::vector<double>& values, DType like);

bool has_partial(const MetricTensor& v);

// v's local contribution: a host tensor in the accumulation dtype.
using LocalContribution = std::function<Tensor(const MetricTensor& v)>;

// Each value's tensor replaced by its contribution, or by a host copy when it has a Partial
// relation (compacted after resolve_partials).
std::vector<MetricTensor> prepare_contributions(std::vector<MetricTensor> values, const LocalContribution& contribution);

// Sums every Partial value over its Partial axes (one axis per stage, all values together), forms
// its contribution, then continues with `then` on the whole list (order kept). No stage when no
// value is Partial.
MetricProgress resolve_partials(std::vector<MetricTensor> prepared, LocalContribution contribution,
                                std::function<MetricProgress(std::vector<MetricTensor>)> then);

}  // namespace strata::tensor_metrics
