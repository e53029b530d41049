// Strata's tensor metrics beyond the reference (docs/metrics.md "Beyond the reference"):
//   layer-residual-rms, layer-residual-max-abs, layer-residual-kurtosis   (residual_accumulator)
//   global-output-logits-max, global-output-logits-entropy, global-output-z-loss (output_logits)
//   layer-attention-logit-max                                              (attention_logit_max)
//   layer-mhc-sinkhorn-error, layer-mhc-hres-entropy, layer-mhc-stream-l2   (mhc_*, residual_accumulator)
// The reference stack has none of them (the reference stack has "no RMS, kurtosis, max-abs, or output-logit
// entropy metric"); they follow its protocol (local prepare, staged batched collectives).
#pragma once
#include <vector>

#include "training/observability/tensor_metrics/metric_factory.h"

namespace strata::tensor_metrics {

std::vector<MetricFactory> strata_extra_metric_factories();

}  // namespace strata::tensor_metrics
