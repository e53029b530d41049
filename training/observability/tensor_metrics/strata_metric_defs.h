// The definitions behind strata_metrics.h (internal to training/tensor_metrics/): the residual
// and attention metrics (strata_residual_metrics.cpp), the output-logit metrics
// (strata_logit_metrics.cpp), the mHC metrics (mhc_metrics.cpp), the layer-element base they share
// and the host-side chunked reader they use on observed tensors.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "training/observability/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics {

// A layer-labelled metric over the elements of each value: prepare compacts each observed tensor
// into a fixed-size local contribution (float64 on the host); start reduces it with one op over
// the split and Owned axes, combines a layer's occurrences and sites, and finalizes per layer
// label, then `global` (over every layer site, or the mean of the layers' first results).
class LayerElementMetric : public TensorMetric {
 public:
  bool accepts(const MetricSite& site) const override {
    return TensorMetric::accepts(site) && layer_label(site.name).has_value();
  }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override;
  MetricProgress start(std::vector<MetricTensor> prepared) const override;

 protected:
  // The local contribution of one observed tensor (computed in float64).
  virtual std::vector<double> contribution(const Tensor& t) const = 0;
  virtual DType contribution_dtype(DType observed) const { return accumulation_dtype(observed); }
  virtual ReduceOp op() const = 0;
  // One value from the combined contribution (used by the default results()).
  virtual double finalize(const std::vector<double>&) const { return 0.0; }
  // The results of one label (default: {finalize(combined), label}); a metric with several
  // values per label (label/row, label/stream-j) overrides this.
  virtual std::vector<MetricResult> results(const std::string& label, const std::vector<double>& combined) const;
  virtual bool global_is_mean_of_layers() const { return false; }
};

// The last dimension's length (1 for a scalar): the row length for for_each_host_rows.
inline int64_t row_length(const Tensor& t) { return t.dim() > 0 ? t.size(t.dim() - 1) : 1; }

std::unique_ptr<TensorMetric> make_layer_residual_rms();
std::unique_ptr<TensorMetric> make_layer_residual_max_abs();
std::unique_ptr<TensorMetric> make_layer_residual_kurtosis();
std::unique_ptr<TensorMetric> make_layer_attention_logit_max();
std::unique_ptr<TensorMetric> make_global_output_logits_max();
std::unique_ptr<TensorMetric> make_global_output_logits_entropy();
std::unique_ptr<TensorMetric> make_global_output_z_loss();
std::unique_ptr<TensorMetric> make_layer_mhc_sinkhorn_error();
std::unique_ptr<TensorMetric> make_layer_mhc_hres_entropy();
std::unique_ptr<TensorMetric> make_layer_mhc_stream_l2();

// Reads t (any device, dtype, layout) as rows of `row_len` elements in host chunks of about a
// million elements (float64 values; a chunk never splits a row): fn(rows, number of rows).
// row_len 0 (an empty last dim): nothing is read.
void for_each_host_rows(const Tensor& t, int64_t row_len, const std::function<void(const double*, int64_t)>& fn);

}  // namespace strata::tensor_metrics
