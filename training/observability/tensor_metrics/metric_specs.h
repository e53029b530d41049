// logging.tensor_metrics: "NAME:INTERVAL" specs (Megatron's --tensor-metrics, parse_tensor_metric_specs):
// split on the last ':'; unknown names (the error lists the available ones), duplicates, a
// malformed spec, a non-integer or non-positive interval are config errors naming the field;
// the configuration's order is kept. A metric is due on 0-based iteration it iff
// (it + 1) % interval == 0 (reported at iteration it + 1).
// Reference: megatron/training/tensor_metrics/observer.py (parse_tensor_metric_specs,
// ScheduledMetric).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "training/observability/tensor_metrics/metric_factory.h"

namespace strata::tensor_metrics {

struct TensorMetricSpec {
  std::string name;
  int64_t interval = 1;
  bool due(int64_t iteration) const { return (iteration + 1) % interval == 0; }
};

// Throws ConfigError("logging.tensor_metrics", …).
std::vector<TensorMetricSpec> parse_tensor_metric_specs(const std::vector<std::string>& specs,
                                                        const std::vector<MetricFactory>& available);

}  // namespace strata::tensor_metrics
