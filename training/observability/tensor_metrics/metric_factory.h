// A registered tensor metric: its CLI name (logging.tensor_metrics "NAME:INTERVAL"), a one-line
// summary for the error that lists the available names, and how to make it. Each definitions
// file exports its list (generic_metrics.h, router_metrics.h, strata_metrics.h); registry.h joins
// them.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "training/observability/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics {

struct MetricFactory {
  std::string name;
  std::string summary;
  std::function<std::unique_ptr<TensorMetric>()> make;
};

}  // namespace strata::tensor_metrics
