// Router-diagnostic statistics and aggregations (see router_statistics.h).
// Reference: megatron/training/tensor_metrics/router_metrics.py.
#include "training/observability/tensor_metrics/router_statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "models/layers/moe/router_observation.h"

namespace strata::tensor_metrics {

namespace lm = layers::moe;

SequenceDiagnostics normalize_sequence(const double* sums, int64_t E) {
  auto channel = [&](int64_t c) { return std::vector<double>(sums + c * E, sums + (c + 1) * E); };
  SequenceDiagnostics d;
  d.score = channel(lm::kSumScore);
  d.aux = channel(lm::kSumAuxCount);
  d.actual = channel(lm::kSumActualCount);
  d.bias = channel(lm::kSumBias);
  double aux_total = 0, act_total = 0;
  for (int64_t e = 0; e < E; ++e) {
    aux_total += d.aux[static_cast<size_t>(e)];
    act_total += d.actual[static_cast<size_t>(e)];
  }
  d.valid = sums[lm::kSumValidTokens * E];
  for (int64_t e = 0; e < E; ++e) {
    d.score[static_cast<size_t>(e)] /= std::max(d.valid, 1.0);
    d.aux[static_cast<size_t>(e)] /= std::max(aux_total, 1.0);
    d.actual[static_cast<size_t>(e)] /= std::max(act_total, 1.0);
  }
  d.overlap = sums[lm::kSumOverlapCount * E] / std::max(aux_total, 1.0);
  d.margin = sums[lm::kSumMargin * E] / std::max(sums[lm::kSumBoundaryTokens * E], 1.0);
  return d;
}

namespace {

using V = std::vector<double>;

double sum_of(const V& x) {
  double s = 0;
  for (double v : x) s += v;
  return s;
}
double max_of(const V& x) { return *std::max_element(x.begin(), x.end()); }
double min_of(const V& x) { return *std::min_element(x.begin(), x.end()); }
// Σ (x − cx)(y − cy)
double centered_dot(const V& x, double cx, const V& y, double cy) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += (x[i] - cx) * (y[i] - cy);
  return s;
}
double ratio_or_zero(double num, double den) { return den > 0 ? num / den : 0.0; }
double correlation(const V& x, const V& y) {
  const double mx = sum_of(x) / static_cast<double>(x.size()), my = sum_of(y) / static_cast<double>(y.size());
  return ratio_or_zero(centered_dot(x, mx, y, my), std::sqrt(centered_dot(x, mx, x, mx) * centered_dot(y, my, y, my)));
}
double imbalance(const V& x) {
  const double u = 1.0 / static_cast<double>(x.size());
  return static_cast<double>(x.size()) * centered_dot(x, u, x, u);
}
double seq_aux_loss(const V& a, const V& s) { return static_cast<double>(a.size()) * centered_dot(a, 0, s, 0); }
double total_variation(const V& a, const V& c) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] - c[i]);
  return 0.5 * s;
}

double bias_statistic(RouterStatistic st, const V& b) {
  const double E = static_cast<double>(b.size()), mean = sum_of(b) / E;
  switch (st) {
    case RouterStatistic::BiasMean: return mean;
    case RouterStatistic::BiasStd: return std::sqrt(centered_dot(b, mean, b, mean) / E);
    case RouterStatistic::BiasRms: return std::sqrt(centered_dot(b, 0, b, 0) / E);
    case RouterStatistic::BiasRange: return max_of(b) - min_of(b);
    case RouterStatistic::BiasAbsMax: return std::max(std::abs(max_of(b)), std::abs(min_of(b)));
    default: break;
  }
  STRATA_INTERNAL_ASSERT(false, "router statistics: not a bias statistic");
  return 0.0;
}

// The global-batch statistics of renormalised S, A, C.
double global_statistic(RouterStatistic st, const V& S, const V& A, const V& C) {
  const double E = static_cast<double>(S.size());
  switch (st) {
    case RouterStatistic::GlobalBatchAuxLoss: return seq_aux_loss(A, S);
    case RouterStatistic::ActualLoadImbalance: return imbalance(C);
    case RouterStatistic::AuxActualTv: return total_variation(A, C);
    case RouterStatistic::AuxMaxOverMean: return E * max_of(A);
    case RouterStatistic::ActualMaxOverMean: return E * max_of(C);
    default: break;
  }
  STRATA_CHECK(false, "router metrics: statistic ", static_cast<int>(st), " has no global-batch form");
  return 0.0;
}

}  // namespace

ReduceOp RouterOperation::reduce_op() const {
  switch (aggregation) {
    case RouterAggregation::Max: return ReduceOp::Max;
    case RouterAggregation::Min: return ReduceOp::Min;
    default: return ReduceOp::Sum;
  }
}

double sequence_statistic(RouterStatistic st, const SequenceDiagnostics& d) {
  const V &a = d.aux, &s = d.score, &c = d.actual;
  const double E = static_cast<double>(a.size()), u = 1.0 / E;
  switch (st) {
    case RouterStatistic::SeqAuxLoss: return seq_aux_loss(a, s);
    case RouterStatistic::AuxLoadImbalance: return imbalance(a);
    case RouterStatistic::ScoreImbalance: return imbalance(s);
    case RouterStatistic::ImbalanceCoupling: return E * centered_dot(a, u, s, u);
    case RouterStatistic::ImbalanceAlignment:
      return ratio_or_zero(centered_dot(a, u, s, u), std::sqrt(centered_dot(a, u, a, u) * centered_dot(s, u, s, u)));
    case RouterStatistic::ActualLoadImbalance: return imbalance(c);
    case RouterStatistic::AuxActualTv: return total_variation(a, c);
    case RouterStatistic::AuxActualOverlap: return d.overlap;
    case RouterStatistic::AuxMaxOverMean: return E * max_of(a);
    case RouterStatistic::ActualMaxOverMean: return E * max_of(c);
    case RouterStatistic::ActualInactiveFraction: return static_cast<double>(std::count(c.begin(), c.end(), 0.0)) / E;
    case RouterStatistic::TopkBoundaryRelativeMargin: return d.margin;
    case RouterStatistic::BiasScoreCorrelation: return correlation(d.bias, s);
    case RouterStatistic::BiasAuxLoadCorrelation: return correlation(d.bias, a);
    case RouterStatistic::BiasActualLoadCorrelation: return correlation(d.bias, c);
    case RouterStatistic::GlobalBatchAuxLoss:
    case RouterStatistic::SeqGlobalAuxLossGap: break;
    default: return bias_statistic(st, d.bias);
  }
  STRATA_CHECK(false, "router metrics: statistic ", static_cast<int>(st), " needs the global aggregation");
  return 0.0;
}

std::vector<double> empty_contribution(const RouterOperation& op, int64_t E) {
  switch (op.aggregation) {
    case RouterAggregation::Mean: return {0.0, 0.0};
    case RouterAggregation::Max: return {-std::numeric_limits<double>::infinity()};
    case RouterAggregation::Min: return {std::numeric_limits<double>::infinity()};
    case RouterAggregation::Global: break;
  }
  const size_t gap = op.statistic == RouterStatistic::SeqGlobalAuxLossGap ? 2 : 0;
  return std::vector<double>(gap + 3 * static_cast<size_t>(E), 0.0);
}

void add_sequence(const RouterOperation& op, const SequenceDiagnostics& d, std::vector<double>& out) {
  switch (op.aggregation) {
    case RouterAggregation::Mean:
      out[0] += sequence_statistic(op.statistic, d);
      out[1] += 1;
      return;
    case RouterAggregation::Max: out[0] = std::max(out[0], sequence_statistic(op.statistic, d)); return;
    case RouterAggregation::Min: out[0] = std::min(out[0], sequence_statistic(op.statistic, d)); return;
    case RouterAggregation::Global: break;
  }
  size_t at = 0;
  if (op.statistic == RouterStatistic::SeqGlobalAuxLossGap) {
    out[0] += seq_aux_loss(d.aux, d.score);
    out[1] += 1;
    at = 2;
  }
  const size_t E = d.score.size();
  for (size_t e = 0; e < E; ++e) {  // token-weighted distributions
    out[at + e] += d.score[e] * d.valid;
    out[at + E + e] += d.aux[e] * d.valid;
    out[at + 2 * E + e] += d.actual[e] * d.valid;
  }
}

double finalize_contribution(const RouterOperation& op, const std::vector<double>& c, int64_t E) {
  switch (op.aggregation) {
    case RouterAggregation::Mean: return c[0] / std::max(c[1], 1.0);
    case RouterAggregation::Max:
    case RouterAggregation::Min: return c[0];
    case RouterAggregation::Global: break;
  }
  const bool gap = op.statistic == RouterStatistic::SeqGlobalAuxLossGap;
  const size_t at = gap ? 2 : 0, n = static_cast<size_t>(E);
  auto renormalised = [&](size_t from) {
    V x(c.begin() + static_cast<std::ptrdiff_t>(from), c.begin() + static_cast<std::ptrdiff_t>(from + n));
    const double total = std::max(sum_of(x), 1.0);
    for (double& v : x) v /= total;
    return x;
  };
  const V S = renormalised(at), A = renormalised(at + n), C = renormalised(at + 2 * n);
  if (!gap) return global_statistic(op.statistic, S, A, C);
  return c[0] / std::max(c[1], 1.0) - global_statistic(RouterStatistic::GlobalBatchAuxLoss, S, A, C);
}

}  // namespace strata::tensor_metrics
