// global-param-mean-row-l2 and global-param-mean-column-l2: the population-weighted mean L2 norm
// of the rows (the last dim holds a row's columns) or of the columns (normed over every dim but
// the last) of all selected tensors (Megatron-LM tensor_metrics/definitions.py MeanRowL2NormMetric,
// MeanColumnL2NormMetric, _MeanDimwiseL2NormMetric).
//
// Two stages per value, in one explicit CollectiveStage chain for all values:
//   RESOLVE_NORM: prepare() computes the local sums of squares per row (column) of the logical
//     tensor — a FlatShard range is scattered into the row (column) sums of its logical shape
//     (partial first row, full rows, partial last row) — and marks each axis that splits a normed
//     dim (Shard on a normed dim, FlatShard) Partial (the ranks hold additive parts of the sums)
//     and a Shard on a kept dim a Shard of the norm vector (a population split); start()
//     all-reduces SUM over the Partial axes in relation order; then √ locally.
//   RESOLVE_POPULATION: [Σ norms, number of norms] all-reduced SUM over the remaining split axes,
//     then the Owned axes; placeholders enter here as [0, 0] over all their split and Owned axes.
// Result `global` = Σ norms / Σ count over all values (no result without values). A Shard of
// unknown dim and Partial inputs are rejected (optimizer values are never Partial).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "training/observability/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics {

// The local row (rows = true) or column sums of squares of v in its logical shape (a FlatShard's
// logical shape, else the tensor's), as doubles: one per row (prod of all dims but the last) or
// per column (the last dim).
std::vector<double> dimwise_sums_of_squares(const MetricTensor& v, bool rows);

std::unique_ptr<TensorMetric> make_mean_dimwise_l2(std::string name, std::string kind, bool rows);

}  // namespace strata::tensor_metrics
