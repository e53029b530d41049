// Strata's mHC tensor metrics (docs/metrics.md "mHC"), on the hyper-connection sites of every
// layer (GPT layers have two, around attention and around the MLP/MoE; hybrid layers one), each
// compacted at its site into a fixed-size contribution, reduced over the split axes (tp under
// sequence parallelism, cp, dp) and Owned axes (pp), combined over a layer's sites and
// occurrences, and finalized per layer and `global`:
//   layer-mhc-sinkhorn-error  mhc_sinkhorn_residual [s,b,2]  [max row err, max col err]  Max
//                             → <layer>/row, <layer>/column: max over tokens of max_i |Σ_j H_ij − 1|
//                               (rows) and max_j |Σ_i H_ij − 1| (columns; ≈ 0 after the final
//                               column normalisation)
//   layer-mhc-hres-entropy    mhc_h_res [s,b,n,n]  [Σ rows H(row)/ln n, rows]            Sum
//                             → mean over tokens and rows of the normalised entropy of each
//                               H_res row (each row divided by its sum first; 0 for n = 1):
//                               1 = uniform mixing (the initial state, H_res ≈ 1/n), 0 = a
//                               permutation (every stream kept apart)
//   layer-mhc-stream-l2       residual_accumulator [s,b,n,h]  [Σ x_0², …, Σ x_{n−1}²]     Sum
//                             → <layer>/stream-j = √(Σ x_j²) over the step's tokens, one per
//                               residual stream (a 3-d residual without mHC is one stream)
// Reference: the mHC paper's stability analysis (arXiv 2512.24880: the Sinkhorn constraint keeps
// H_res doubly stochastic; the unconstrained HC streams' norms explode) — the metrics are Strata's;
// they follow the reference stack's protocol (megatron/training/tensor_metrics/core.py).
#include <algorithm>
#include <cmath>
#include <memory>

#include "training/observability/tensor_metrics/logical_reduction.h"
#include "training/observability/tensor_metrics/strata_metric_defs.h"

namespace strata::tensor_metrics {

namespace {

// Labels "<label>/<part>" for each value of a combined contribution.
std::vector<MetricResult> labelled_parts(const std::string& label, const std::vector<std::string>& parts,
                                         const std::vector<double>& values) {
  std::vector<MetricResult> out;
  for (size_t i = 0; i < parts.size(); ++i) out.push_back({values.at(i), label + "/" + parts[i]});
  return out;
}

class LayerMhcSinkhornError : public LayerElementMetric {
 public:
  std::string name() const override { return "layer-mhc-sinkhorn-error"; }
  std::vector<std::string> source_kinds() const override { return {"mhc_sinkhorn_residual"}; }

 protected:
  std::vector<double> contribution(const Tensor& t) const override {
    double row = 0, col = 0;  // the errors are ≥ 0; an empty shard contributes 0
    for_each_host_rows(t, 2, [&](const double* x, int64_t rows) {
      for (int64_t r = 0; r < rows; ++r) row = std::max(row, x[2 * r]), col = std::max(col, x[2 * r + 1]);
    });
    return {row, col};
  }
  ReduceOp op() const override { return ReduceOp::Max; }
  std::vector<MetricResult> results(const std::string& label, const std::vector<double>& c) const override {
    return labelled_parts(label, {"row", "column"}, c);
  }
};

class LayerMhcHresEntropy : public LayerElementMetric {
 public:
  std::string name() const override { return "layer-mhc-hres-entropy"; }
  std::vector<std::string> source_kinds() const override { return {"mhc_h_res"}; }

 protected:
  std::vector<double> contribution(const Tensor& t) const override {
    const int64_t n = row_length(t);
    double sum = 0, rows = 0;
    for_each_host_rows(t, n, [&](const double* x, int64_t count) {
      for (int64_t r = 0; r < count; ++r) {
        sum += normalized_entropy(x + r * n, n);
        rows += 1;
      }
    });
    return {sum, rows};
  }
  DType contribution_dtype(DType) const override { return DType::F64; }
  ReduceOp op() const override { return ReduceOp::Sum; }
  double finalize(const std::vector<double>& c) const override { return c[1] > 0 ? c[0] / c[1] : 0.0; }

 private:
  static double normalized_entropy(const double* row, int64_t n) {
    if (n < 2) return 0.0;
    double total = 0, h = 0;
    for (int64_t j = 0; j < n; ++j) total += row[j];
    if (!(total > 0)) return 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double p = row[j] / total;
      if (p > 0) h -= p * std::log(p);
    }
    return h / std::log(static_cast<double>(n));
  }
};

class LayerMhcStreamL2 : public LayerElementMetric {
 public:
  std::string name() const override { return "layer-mhc-stream-l2"; }
  std::vector<std::string> source_kinds() const override { return {"residual_accumulator"}; }
  bool needs_hyper_connections() const override { return true; }

 protected:
  std::vector<double> contribution(const Tensor& t) const override {
    const int64_t streams = t.dim() == 4 ? t.size(2) : 1, h = row_length(t);
    std::vector<double> ss(static_cast<size_t>(streams), 0.0);
    for_each_host_rows(t, streams * h, [&](const double* x, int64_t tokens) {  // a row: one token's streams
      for (int64_t r = 0; r < tokens * streams; ++r) {
        double& acc = ss[static_cast<size_t>(r % streams)];
        for (int64_t c = 0; c < h; ++c) acc += x[r * h + c] * x[r * h + c];
      }
    });
    return ss;
  }
  ReduceOp op() const override { return ReduceOp::Sum; }
  std::vector<MetricResult> results(const std::string& label, const std::vector<double>& c) const override {
    std::vector<std::string> parts;
    std::vector<double> norms;
    for (size_t j = 0; j < c.size(); ++j) {
      parts.push_back("stream-" + std::to_string(j));
      norms.push_back(std::sqrt(c[j]));
    }
    return labelled_parts(label, parts, norms);
  }
};

}  // namespace

std::unique_ptr<TensorMetric> make_layer_mhc_sinkhorn_error() { return std::make_unique<LayerMhcSinkhornError>(); }
std::unique_ptr<TensorMetric> make_layer_mhc_hres_entropy() { return std::make_unique<LayerMhcHresEntropy>(); }
std::unique_ptr<TensorMetric> make_layer_mhc_stream_l2() { return std::make_unique<LayerMhcStreamL2>(); }

}  // namespace strata::tensor_metrics
