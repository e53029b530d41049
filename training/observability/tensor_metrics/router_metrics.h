// The diagnostic-based router metrics (Megatron router_metrics.py, PR #6649), read
// from Strata's router_diagnostic_sums so that they are exact when a sequence is split over
// sequence-parallel (tp) and context-parallel (cp) ranks, which Megatron refuses:
//   layer-router-health                  global + worst-layer scopes
//   layer-router-seq-aux-decomposition   per-layer + global
//   layer-router-routing-balance         per-layer + global
//   layer-router-expert-bias             per-layer + global
// Labels "<scope>/<operation>", scope a layer label ("decoder.layers.3"), "global" or
// "worst-layer". Flow: prepare keeps a host copy of each [b, 8, E] value; stage 1 (values with a
// Partial relation only) merges a sequence's shards: one all-reduce SUM of the additive channels
// and one MAX of the bias channel, per Partial axis; then every sequence with valid tokens gives
// its statistics, each operation's contributions per layer are reduced with its ReduceOp over the
// split then Owned (pp) axes (reduce_logically), and the global and worst-layer scopes are
// computed locally from the reduced per-layer contributions. Sites without a layers.N label are
// not accepted. Statistics and aggregations: router_statistics.h; docs/metrics.md.
// Reference: megatron/training/tensor_metrics/router_metrics.py.
#pragma once
#include <vector>

#include "training/observability/tensor_metrics/metric_factory.h"
#include "training/observability/tensor_metrics/router_statistics.h"

namespace strata::tensor_metrics {

std::vector<MetricFactory> router_diagnostic_metric_factories();

}  // namespace strata::tensor_metrics
