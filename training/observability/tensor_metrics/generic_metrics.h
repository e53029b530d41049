// The reference's generic tensor metrics under their registered names (Megatron-LM
// tensor_metrics/definitions.py, router_metrics.py' simple router metrics and observer.py's
// _TENSOR_METRIC_FACTORIES), plus
// Strata's `param-group/*` labels of layer-wgrad-l2 and global-nonfinite-origin:
//   global-param-l2, layer-param-l2, global-param-mean-row-l2, global-param-mean-column-l2,
//   global-wgrad-l2, layer-wgrad-l2, layer-residual-accumulator-l2, layer-residual-contribution-l2,
//   global-output-logits-l2, global-mtp-logits-l2, layer-router-logits-l2, layer-router-logits-max,
//   layer-router-logits-sampled-median, layer-router-decision-entropy, global-nonfinite-origin.
// Formulas, labels and how to read them: docs/metrics.md ("Reference metrics").
#pragma once
#include <string>
#include <vector>

#include "training/observability/tensor_metrics/logical_reduction.h"
#include "training/observability/tensor_metrics/metric_core.h"
#include "training/observability/tensor_metrics/metric_factory.h"

namespace strata::tensor_metrics {

// Which labels a metric reports: `global` alone (every accepted site), one per layer
// label (only sites with a layer label are accepted), or per layer then `global` (over the
// layer sites).
enum class LabelScope { Global, Layers, LayersAndGlobal };

// Whether a site of an accepted kind belongs to a metric of this scope.
bool scope_accepts(LabelScope scope, const MetricSite& site);
// The labelled groups of a scope: layers in natural order, then `global`; none when empty.
std::vector<LabeledValues> scoped_groups(const std::vector<MetricTensor>& values, LabelScope scope);

std::vector<MetricFactory> generic_metric_factories();

}  // namespace strata::tensor_metrics
