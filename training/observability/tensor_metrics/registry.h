// Every tensor metric `logging.tensor_metrics` can name: the reference's 18 (generic_metrics.h,
// router_metrics.h) and Strata's (strata_metrics.h), in that order; and the config check.
// Reference: megatron/training/tensor_metrics/observer.py (_TENSOR_METRIC_FACTORIES).
#pragma once
#include <vector>

#include "training/config/config.h"
#include "training/observability/tensor_metrics/metric_factory.h"

namespace strata::tensor_metrics {

const std::vector<MetricFactory>& tensor_metric_factories();

// logging.tensor_metrics: the specs parse (metric_specs.h), and each named metric can see its
// sites in this model (router metrics need MoE layers; MTP metrics MTP layers). ConfigError
// naming the field otherwise. Pure: runs before anything is allocated.
void validate_tensor_metrics(const ResolvedConfig& c);

}  // namespace strata::tensor_metrics
