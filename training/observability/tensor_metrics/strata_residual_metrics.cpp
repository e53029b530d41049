// Strata's per-layer element metrics (docs/metrics.md "Beyond the reference"): each observed
// tensor is compacted at once into a small fixed-size contribution, reduced with one op over its
// split axes (tp under sequence parallelism, cp, dp) and Owned axes (pp), combined over the
// occurrences (micro-batches, model chunks) of its layer, and finalized per layer and `global`.
//   layer-residual-rms       [Σx², n]                     Sum   √(Σx²/n)            global: all layers' elements
//   layer-residual-max-abs   [max |x|]                    Max   max |x|              global: max over layers
//   layer-residual-kurtosis  [n, Σx, Σx², Σx³, Σx⁴] (f64) Sum   m4/m2² (central)     global: mean over layers
//   layer-attention-logit-max [max logit]                 Max   max logit            global: max over layers
// Reference: megatron/training/tensor_metrics/definitions.py (LayerMaxMetric's pattern); the
// metrics themselves are Strata's.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "training/observability/tensor_metrics/logical_reduction.h"
#include "training/observability/tensor_metrics/strata_metric_defs.h"

namespace strata::tensor_metrics {

std::vector<MetricTensor> LayerElementMetric::prepare(std::vector<MetricTensor> values) const {
  for (MetricTensor& v : values) {
    const std::vector<double> c = contribution(v.tensor);
    v.tensor = Tensor::from_vector(c, {static_cast<int64_t>(c.size())}, contribution_dtype(v.tensor.dtype()));
  }
  return values;
}

MetricProgress LayerElementMetric::start(std::vector<MetricTensor> prepared) const {
  if (prepared.empty()) return {};
  std::vector<LabeledValues> groups = group_by_layer(prepared);
  const bool mean_global = global_is_mean_of_layers();
  groups.push_back({"global", mean_global ? std::vector<MetricTensor>{} : prepared});
  auto layers = std::make_shared<std::vector<double>>();
  return reduce_logically(std::move(groups), op(),
                          [this, layers, mean_global](const std::string& label, const std::vector<double>& c) {
                            if (label != "global") {
                              std::vector<MetricResult> r = results(label, c);
                              if (mean_global && !r.empty()) layers->push_back(r.front().value);
                              return r;
                            }
                            if (!mean_global) return results(label, c);
                            double sum = 0;
                            for (double x : *layers) sum += x;
                            const double mean = layers->empty() ? std::nan("") : sum / static_cast<double>(layers->size());
                            return std::vector<MetricResult>{{mean, label}};
                          });
}

std::vector<MetricResult> LayerElementMetric::results(const std::string& label, const std::vector<double>& c) const {
  return {{finalize(c), label}};
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();


class LayerResidualRms : public LayerElementMetric {
 public:
  std::string name() const override { return "layer-residual-rms"; }
  std::vector<std::string> source_kinds() const override { return {"residual_accumulator"}; }

 protected:
  std::vector<double> contribution(const Tensor& t) const override {
    double ss = 0;
    for_each_host_rows(t, row_length(t), [&](const double* x, int64_t rows) {
      for (int64_t i = 0; i < rows * row_length(t); ++i) ss += x[i] * x[i];
    });
    return {ss, static_cast<double>(t.numel())};
  }
  ReduceOp op() const override { return ReduceOp::Sum; }
  double finalize(const std::vector<double>& c) const override { return std::sqrt(c[0] / c[1]); }
};

// max over the elements of f(x) (−inf for an empty tensor).
template <typename F>
double element_max(const Tensor& t, F f) {
  double m = kNegInf;
  for_each_host_rows(t, row_length(t), [&](const double* x, int64_t rows) {
    for (int64_t i = 0; i < rows * row_length(t); ++i) m = std::max(m, f(x[i]));
  });
  return m;
}

class LayerResidualMaxAbs : public LayerElementMetric {
 public:
  std::string name() const override { return "layer-residual-max-abs"; }
  std::vector<std::string> source_kinds() const override { return {"residual_accumulator"}; }

 protected:
  std::vector<double> contribution(const Tensor& t) const override {
    return {element_max(t, [](double x) { return std::fabs(x); })};
  }
  ReduceOp op() const override { return ReduceOp::Max; }
  double finalize(const std::vector<double>& c) const override { return c[0]; }
};

// Raw power sums in float64 (the central moments are recovered at the end; f32 sums of x³, x⁴
// would lose the cancellation).
class LayerResidualKurtosis : public LayerElementMetric {
 public:
  std::string name() const override { return "layer-residual-kurtosis"; }
  std::vector<std::string> source_kinds() const override { return {"residual_accumulator"}; }

 protected:
  std::vector<double> contribution(const Tensor& t) const override {
    std::vector<double> s = {static_cast<double>(t.numel()), 0, 0, 0, 0};
    for_each_host_rows(t, row_length(t), [&](const double* x, int64_t rows) {
      for (int64_t i = 0; i < rows * row_length(t); ++i) {
        const double x2 = x[i] * x[i];
        s[1] += x[i], s[2] += x2, s[3] += x2 * x[i], s[4] += x2 * x2;
      }
    });
    return s;
  }
  DType contribution_dtype(DType) const override { return DType::F64; }
  ReduceOp op() const override { return ReduceOp::Sum; }
  double finalize(const std::vector<double>& c) const override {
    const double n = c[0], mu = c[1] / n, e2 = c[2] / n, e3 = c[3] / n, e4 = c[4] / n;
    const double m2 = e2 - mu * mu;
    const double m4 = e4 - 4 * mu * e3 + 6 * mu * mu * e2 - 3 * mu * mu * mu * mu;
    return m4 / (m2 * m2);
  }
  bool global_is_mean_of_layers() const override { return true; }
};

class LayerAttentionLogitMax : public LayerElementMetric {
 public:
  std::string name() const override { return "layer-attention-logit-max"; }
  std::vector<std::string> source_kinds() const override { return {"attention_logit_max"}; }
  // The site's [heads] tensor has no sequence or batch dim, but its value depends on this rank's
  // queries: it is a population over cp and dp whatever relation it arrived with (an axis of size
  // 1 costs nothing).
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    for (MetricTensor& v : values)
      for (Axis a : {Axis::CP, Axis::DP}) {
        const Placement* p = v.relation(a);
        if (!p || p->kind == Placement::Kind::Replica) v = v.with_placement(a, Placement::shard(std::nullopt));
      }
    return LayerElementMetric::prepare(std::move(values));
  }

 protected:
  std::vector<double> contribution(const Tensor& t) const override {
    return {element_max(t, [](double x) { return x; })};
  }
  ReduceOp op() const override { return ReduceOp::Max; }
  double finalize(const std::vector<double>& c) const override { return c[0]; }
};

}  // namespace

std::unique_ptr<TensorMetric> make_layer_residual_rms() { return std::make_unique<LayerResidualRms>(); }
std::unique_ptr<TensorMetric> make_layer_residual_max_abs() { return std::make_unique<LayerResidualMaxAbs>(); }
std::unique_ptr<TensorMetric> make_layer_residual_kurtosis() { return std::make_unique<LayerResidualKurtosis>(); }
std::unique_ptr<TensorMetric> make_layer_attention_logit_max() { return std::make_unique<LayerAttentionLogitMax>(); }

}  // namespace strata::tensor_metrics
