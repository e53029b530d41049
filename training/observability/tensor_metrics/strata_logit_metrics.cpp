// Strata's output-logit metrics (docs/metrics.md "Beyond the reference"). The logits
// [s, b, v/tp] are vocab-parallel (tp Shard(last dim)); every column of Strata's output layer
// counts, padded vocabulary rows included (Megatron's vocab-parallel cross entropy takes its
// softmax over the padded vocabulary too).
//   global-output-logits-max      [max x]                     Max over every axis
//   global-output-logits-entropy  mean over tokens of H = −Σ p log p, p = softmax(x) over the full vocabulary
//   global-output-z-loss          mean over tokens of logsumexp(x)²
// The last two compact each token's vocab shard into (m = max x, s = Σ e^(x−m),
// t = Σ (x−m) e^(x−m)) in prepare ([tokens, 3]); start all-gathers these over tp when the logits
// are vocab-parallel (prepare marks that relation Partial) and merges them exactly:
//   M = max m_r, S = Σ s_r e^(m_r−M), U = Σ e^(m_r−M) (t_r + (m_r−M) s_r),
//   logsumexp = M + log S, H = log S − U/S;
// then the per-token values' [Σ, count] are summed over cp, dp (token populations) and pp
// (Owned; placeholders add 0) and divided.
// Reference: megatron/core/tensor_parallel/cross_entropy.py (the vocab-parallel max / Σexp
// merge); the metrics are Strata's.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "training/observability/tensor_metrics/logical_reduction.h"
#include "training/observability/tensor_metrics/strata_metric_defs.h"

namespace strata::tensor_metrics {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
const char* const kLogitKind = "output_logits";

int64_t vocab_len(const Tensor& t) { return t.dim() > 0 ? t.size(t.dim() - 1) : 1; }
int64_t token_count(const Tensor& t) {
  int64_t n = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) n *= t.size(d);
  return n;
}

class GlobalOutputLogitsMax : public TensorMetric {
 public:
  std::string name() const override { return "global-output-logits-max"; }
  std::vector<std::string> source_kinds() const override { return {kLogitKind}; }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    for (MetricTensor& v : values) {
      double m = kNegInf;
      for_each_host_rows(v.tensor, vocab_len(v.tensor), [&](const double* x, int64_t rows) {
        for (int64_t i = 0; i < rows * vocab_len(v.tensor); ++i) m = std::max(m, x[i]);
      });
      v.tensor = Tensor::from_vector({m}, {1}, accumulation_dtype(v.tensor.dtype()));
    }
    return values;
  }
  MetricProgress start(std::vector<MetricTensor> prepared) const override {
    if (prepared.empty()) return {};
    return reduce_logically({{"global", std::move(prepared)}}, ReduceOp::Max,
                            [](const std::string& label, const std::vector<double>& c) {
                              return std::vector<MetricResult>{{c[0], label}};
                            });
  }
};

// Per token of one vocab shard: (max, Σ e^(x−max), Σ (x−max) e^(x−max)); an empty shard (−inf, 0, 0).
void shard_statistics(const double* x, int64_t v, double* out) {
  double m = kNegInf;
  for (int64_t j = 0; j < v; ++j) m = std::max(m, x[j]);
  double s = 0, t = 0;
  for (int64_t j = 0; j < v; ++j) {
    const double e = std::exp(x[j] - m);
    s += e, t += (x[j] - m) * e;
  }
  out[0] = m, out[1] = s, out[2] = t;
}

// A mean over tokens of a function of the token's full-vocabulary logsumexp and entropy.
class TokenSoftmaxMetric : public TensorMetric {
 public:
  std::vector<std::string> source_kinds() const override { return {kLogitKind}; }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override;
  MetricProgress start(std::vector<MetricTensor> prepared) const override;

 protected:
  virtual double token_value(double logsumexp, double entropy) const = 0;

 private:
  // stats: [parts, tokens, 3] (or [tokens, 3]) -> [Σ token values, tokens] in stats' dtype.
  MetricTensor merge(const MetricTensor& stats) const;
};

std::vector<MetricTensor> TokenSoftmaxMetric::prepare(std::vector<MetricTensor> values) const {
  for (MetricTensor& v : values) {
    const int64_t vocab = vocab_len(v.tensor), tokens = token_count(v.tensor);
    std::vector<double> st(static_cast<size_t>(tokens * 3));
    for (int64_t i = 0; i < tokens; ++i) st[static_cast<size_t>(i * 3)] = kNegInf;  // an empty shard
    int64_t row = 0;
    for_each_host_rows(v.tensor, vocab, [&](const double* x, int64_t rows) {
      for (int64_t i = 0; i < rows; ++i, ++row) shard_statistics(x + i * vocab, vocab, &st[static_cast<size_t>(row * 3)]);
    });
    const int last = v.tensor.dim() - 1;
    const Placement* tp = v.relation(Axis::TP);
    const bool vocab_parallel = tp && tp->kind == Placement::Kind::Shard && tp->dim && *tp->dim == last;
    MetricTensor p = v.with_tensor(Tensor::from_vector(st, {tokens, 3}, accumulation_dtype(v.tensor.dtype())));
    // Parts of each token's softmax over the vocabulary: merged by log-sum-exp in start().
    if (vocab_parallel) p = p.with_placement(Axis::TP, Placement::partial());
    v = std::move(p);
  }
  return values;
}

MetricTensor TokenSoftmaxMetric::merge(const MetricTensor& stats) const {
  const Tensor& t = stats.tensor;
  const int64_t parts = t.dim() == 3 ? t.size(0) : 1, tokens = t.size(t.dim() - 2);
  const std::vector<double> x = t.to_vector();
  double sum = 0;
  for (int64_t i = 0; i < tokens && !stats.placeholder; ++i) {
    auto at = [&](int64_t r, int c) { return x[static_cast<size_t>((r * tokens + i) * 3 + c)]; };
    double M = kNegInf;
    for (int64_t r = 0; r < parts; ++r)
      if (at(r, 1) > 0) M = std::max(M, at(r, 0));
    double S = 0, U = 0;
    for (int64_t r = 0; r < parts; ++r) {
      if (at(r, 1) <= 0) continue;  // an empty shard
      const double w = std::exp(at(r, 0) - M);
      S += w * at(r, 1), U += w * (at(r, 2) + (at(r, 0) - M) * at(r, 1));
    }
    sum += token_value(M + std::log(S), std::log(S) - U / S);
  }
  const double n = stats.placeholder ? 0.0 : static_cast<double>(tokens);
  return stats.with_tensor(Tensor::from_vector({sum, n}, {2}, t.dtype()));
}

MetricProgress TokenSoftmaxMetric::start(std::vector<MetricTensor> prepared) const {
  if (prepared.empty()) return {};
  auto finish = [this](std::vector<MetricTensor> merged) {
    return reduce_logically({{"global", std::move(merged)}}, ReduceOp::Sum,
                            [](const std::string& label, const std::vector<double>& c) {
                              return std::vector<MetricResult>{{c[0] / c[1], label}};
                            });
  };
  CollectiveStage stage;
  std::vector<size_t> gathered;
  for (size_t i = 0; i < prepared.size(); ++i) {
    const Placement* tp = prepared[i].relation(Axis::TP);
    if (tp && tp->kind == Placement::Kind::Partial) {
      stage.requests.push_back({prepared[i], Axis::TP, Collective::all_gather()});
      gathered.push_back(i);
    }
  }
  if (stage.requests.empty()) {
    std::vector<MetricTensor> merged;
    for (const MetricTensor& v : prepared) merged.push_back(merge(v));
    return finish(std::move(merged));
  }
  auto held = std::make_shared<std::vector<MetricTensor>>(std::move(prepared));
  stage.resume = [this, held, gathered, finish](std::vector<MetricTensor> done) {
    for (size_t k = 0; k < gathered.size(); ++k) (*held)[gathered[k]] = std::move(done[k]);
    std::vector<MetricTensor> merged;
    for (const MetricTensor& v : *held) merged.push_back(merge(v));
    return finish(std::move(merged));
  };
  MetricProgress p;
  p.stages.push_back(std::move(stage));
  return p;
}

class GlobalOutputLogitsEntropy : public TokenSoftmaxMetric {
 public:
  std::string name() const override { return "global-output-logits-entropy"; }

 protected:
  double token_value(double, double entropy) const override { return entropy; }
};

class GlobalOutputZLoss : public TokenSoftmaxMetric {
 public:
  std::string name() const override { return "global-output-z-loss"; }

 protected:
  double token_value(double logsumexp, double) const override { return logsumexp * logsumexp; }
};

}  // namespace

std::unique_ptr<TensorMetric> make_global_output_logits_max() { return std::make_unique<GlobalOutputLogitsMax>(); }
std::unique_ptr<TensorMetric> make_global_output_logits_entropy() {
  return std::make_unique<GlobalOutputLogitsEntropy>();
}
std::unique_ptr<TensorMetric> make_global_output_z_loss() { return std::make_unique<GlobalOutputZLoss>(); }

}  // namespace strata::tensor_metrics
