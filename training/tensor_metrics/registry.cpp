// The tensor-metric registry and its config check (see registry.h).
#include "training/tensor_metrics/registry.h"

#include <algorithm>

#include "core/config_table.h"
#include "training/tensor_metrics/generic_metrics.h"
#include "training/tensor_metrics/metric_specs.h"
#include "training/tensor_metrics/router_metrics.h"
#include "training/tensor_metrics/strata_metrics.h"

namespace strata::tensor_metrics {

const std::vector<MetricFactory>& tensor_metric_factories() {
  static const std::vector<MetricFactory> all = [] {
    std::vector<MetricFactory> v = generic_metric_factories();
    for (auto* part : {router_diagnostic_metric_factories, strata_extra_metric_factories})
      for (MetricFactory& f : part()) v.push_back(std::move(f));
    return v;
  }();
  return all;
}

void validate_tensor_metrics(const StrataConfig& c) {
  const std::vector<TensorMetricSpec> specs = parse_tensor_metric_specs(c.logging.tensor_metrics, tensor_metric_factories());
  for (const TensorMetricSpec& s : specs) {
    const auto f = std::find_if(tensor_metric_factories().begin(), tensor_metric_factories().end(),
                                [&](const MetricFactory& x) { return x.name == s.name; });
    if (s.name.rfind("layer-mhc-", 0) == 0 && !c.model.enable_hyper_connections)
      throw config::ConfigError("logging.tensor_metrics",
                                "'" + s.name + "' reads the mHC hyper-connection sites, and this model has none "
                                "(model.enable_hyper_connections is false)");
    for (const std::string& kind : f->make()->source_kinds()) {
      if (kind.rfind("router_", 0) == 0 && !c.model.is_moe())
        throw config::ConfigError("logging.tensor_metrics",
                                  "'" + s.name + "' reads the MoE routers, and this model has no MoE layers "
                                  "(model.num_experts)");
      if (kind == "mtp_logits")
        throw config::ConfigError("logging.tensor_metrics",
                                  "'" + s.name + "' reads the MTP heads' logits, and this model has no MTP layers");
    }
  }
}

}  // namespace strata::tensor_metrics
