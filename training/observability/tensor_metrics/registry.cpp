// The tensor-metric registry and its config check (see registry.h).
#include "training/observability/tensor_metrics/registry.h"

#include <algorithm>

#include "core/config_table.h"
#include "core/observe.h"
#include "models/model_manifest.h"
#include "training/observability/tensor_metrics/generic_metrics.h"
#include "training/observability/tensor_metrics/metric_specs.h"
#include "training/observability/tensor_metrics/router_metrics.h"
#include "training/observability/tensor_metrics/strata_metrics.h"

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

namespace {
// Why a model emits no site of an observation kind: the config field that would add them.
std::string missing_sites(const std::string& kind) {
  if (kind.rfind("router_", 0) == 0) return "this model has no MoE layers (model.num_experts)";
  if (kind.rfind("mhc_", 0) == 0) return "this model has no hyper-connections (model.enable_hyper_connections is false)";
  if (kind == "mtp_logits") return "this model has no MTP layers (model.mtp_num_layers)";
  return "this model emits none";
}
}  // namespace

// Each metric's observation kinds against the sites of the model's manifest (of the section
// validate() resolved before it runs the registered rules).
void validate_tensor_metrics(const ResolvedConfig& c) {
  const std::vector<TensorMetricSpec> specs = parse_tensor_metric_specs(c.logging->tensor_metrics, tensor_metric_factories());
  if (specs.empty()) return;
  SourceKinds emitted;
  for (const ObservationSite& site : describe_model(c.model).sites) emitted = emitted | SourceKinds{site.kind};
  for (const TensorMetricSpec& s : specs) {
    const auto f = std::find_if(tensor_metric_factories().begin(), tensor_metric_factories().end(),
                                [&](const MetricFactory& x) { return x.name == s.name; });
    const std::unique_ptr<TensorMetric> metric = f->make();
    if (metric->needs_hyper_connections() && !c.model->enable_hyper_connections)
      throw config::ConfigError("logging.tensor_metrics", "'" + s.name + "' reads the mHC residual streams, and " +
                                                              missing_sites("mhc_h_pre"));
    for (const std::string& kind : metric->source_kinds()) {
      const std::optional<SourceKind> k = source_kind_from_name(kind);
      if (k && !emitted.contains(*k))
        throw config::ConfigError("logging.tensor_metrics",
                                  "'" + s.name + "' reads the " + kind + " sites, and " + missing_sites(kind));
    }
  }
}

}  // namespace strata::tensor_metrics
