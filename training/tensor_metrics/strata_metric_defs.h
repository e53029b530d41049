// The definitions behind strata_metrics.h (internal to training/tensor_metrics/): the residual
// and attention metrics (strata_residual_metrics.cpp), the output-logit metrics
// (strata_logit_metrics.cpp), and the host-side chunked reader both use on observed tensors.
#pragma once
#include <functional>
#include <memory>

#include "training/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics {

std::unique_ptr<TensorMetric> make_layer_residual_rms();
std::unique_ptr<TensorMetric> make_layer_residual_max_abs();
std::unique_ptr<TensorMetric> make_layer_residual_kurtosis();
std::unique_ptr<TensorMetric> make_layer_attention_logit_max();
std::unique_ptr<TensorMetric> make_global_output_logits_max();
std::unique_ptr<TensorMetric> make_global_output_logits_entropy();
std::unique_ptr<TensorMetric> make_global_output_z_loss();

// Reads t (any device, dtype, layout) as rows of `row_len` elements in host chunks of about a
// million elements (float64 values; a chunk never splits a row): fn(rows, number of rows).
// row_len 0 (an empty last dim): nothing is read.
void for_each_host_rows(const Tensor& t, int64_t row_len, const std::function<void(const double*, int64_t)>& fn);

}  // namespace strata::tensor_metrics
