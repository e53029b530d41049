// The diagnostic-based router metrics (see router_metrics.h).
// Reference: megatron/training/tensor_metrics/router_metrics.py.
#include "training/observability/tensor_metrics/router_metrics.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/observe.h"
#include "models/layers/moe/router_observation.h"
#include "training/observability/tensor_metrics/logical_reduction.h"

namespace strata::tensor_metrics {

namespace {

namespace lm = layers::moe;
using Op = RouterOperation;
using St = RouterStatistic;
using Ag = RouterAggregation;
constexpr int64_t kChannels = lm::kRouterDiagnosticSumChannels;

// Calls `done` once every stage of p (and the stages they lead to) has resumed.
struct Join {
  int64_t pending = 0;
  std::function<std::vector<MetricResult>()> done;
};
MetricProgress track(MetricProgress p, const std::shared_ptr<Join>& j) {
  j->pending += static_cast<int64_t>(p.stages.size());
  for (CollectiveStage& st : p.stages)
    st.resume = [inner = std::move(st.resume), j](std::vector<MetricTensor> completed) {
      MetricProgress next = track(inner(std::move(completed)), j);
      if (--j->pending == 0)
        for (MetricResult& r : j->done()) next.results.push_back(std::move(r));
      return next;
    };
  return p;
}
MetricProgress then(MetricProgress p, std::function<std::vector<MetricResult>()> done) {
  auto j = std::make_shared<Join>(Join{0, std::move(done)});
  p = track(std::move(p), j);
  if (j->pending == 0)
    for (MetricResult& r : j->done()) p.results.push_back(std::move(r));
  return p;
}

const Placement* first_partial(const MetricTensor& v, Axis* axis) {
  for (const RankRelation& r : v.relations)
    if (r.placement.kind == Placement::Kind::Partial) {
      *axis = r.axis;
      return &r.placement;
    }
  return nullptr;
}

// [b, 8, E] -> the additive part [b, 3E + 4] and the bias [b, E] (1-d).
std::pair<Tensor, Tensor> split_channels(const Tensor& t) {
  const int64_t B = t.size(0), E = t.size(2);
  const std::vector<double> x = t.to_vector();
  std::vector<double> add, bias;
  for (int64_t j = 0; j < B; ++j) {
    const double* in = &x[static_cast<size_t>(j * kChannels * E)];
    add.insert(add.end(), in, in + 3 * E);
    for (int64_t c = lm::kSumOverlapCount; c < kChannels; ++c) add.push_back(in[c * E]);
    bias.insert(bias.end(), in + lm::kSumBias * E, in + (lm::kSumBias + 1) * E);
  }
  return {Tensor::from_vector(add, {static_cast<int64_t>(add.size())}, t.dtype()),
          Tensor::from_vector(bias, {static_cast<int64_t>(bias.size())}, t.dtype())};
}
Tensor join_channels(const Tensor& add, const Tensor& bias, int64_t B, int64_t E, DType dtype) {
  const std::vector<double> a = add.to_vector(), b = bias.to_vector();
  std::vector<double> x(static_cast<size_t>(B * kChannels * E), 0.0);
  for (int64_t j = 0; j < B; ++j) {
    double* out = &x[static_cast<size_t>(j * kChannels * E)];
    const double* in = &a[static_cast<size_t>(j * (3 * E + 4))];
    std::copy(in, in + 3 * E, out);
    for (int64_t c = lm::kSumOverlapCount; c < kChannels; ++c) out[c * E] = in[3 * E + c - lm::kSumOverlapCount];
    std::copy(&b[static_cast<size_t>(j * E)], &b[static_cast<size_t>((j + 1) * E)], out + lm::kSumBias * E);
  }
  return Tensor::from_vector(x, {B, kChannels, E}, dtype);
}

using Continue = std::function<MetricProgress(std::vector<MetricTensor>)>;

// Stage 1: every value with a Partial relation merges its sequence shards over that axis (one
// SUM and one MAX request each, all values in one stage), axis by axis; then `next`.
MetricProgress merge_partials(std::vector<MetricTensor> values, Continue next) {
  CollectiveStage stage;
  std::vector<size_t> which;
  for (size_t i = 0; i < values.size(); ++i) {
    Axis axis = Axis::TP;
    if (!first_partial(values[i], &axis)) continue;
    auto [add, bias] = split_channels(values[i].tensor);
    stage.requests.push_back({values[i].with_tensor(add), axis, Collective::all_reduce(ReduceOp::Sum)});
    stage.requests.push_back({values[i].with_tensor(bias), axis, Collective::all_reduce(ReduceOp::Max)});
    which.push_back(i);
  }
  if (which.empty()) return next(std::move(values));
  auto held = std::make_shared<std::vector<MetricTensor>>(std::move(values));
  stage.resume = [held, which, next](std::vector<MetricTensor> done) {
    for (size_t k = 0; k < which.size(); ++k) {
      MetricTensor& v = (*held)[which[k]];
      const Tensor t = join_channels(done[2 * k].tensor, done[2 * k + 1].tensor, v.tensor.size(0), v.tensor.size(2),
                                     v.tensor.dtype());
      v = done[2 * k].with_tensor(t);
    }
    return merge_partials(std::move(*held), next);
  };
  MetricProgress p;
  p.stages.push_back(std::move(stage));
  return p;
}

class RouterDiagnosticMetric : public TensorMetric {
 public:
  RouterDiagnosticMetric(std::string name, std::vector<Op> ops, bool per_layer, bool worst_layer)
      : name_(std::move(name)), ops_(std::move(ops)), per_layer_(per_layer), worst_layer_(worst_layer) {}
  std::string name() const override { return name_; }
  std::vector<std::string> source_kinds() const override {
    return {source_kind_name(SourceKind::RouterDiagnosticSums)};
  }
  bool accepts(const MetricSite& site) const override {
    return TensorMetric::accepts(site) && layer_label(site.name).has_value();
  }
  std::vector<MetricTensor> prepare(std::vector<MetricTensor> values) const override {
    for (MetricTensor& v : values) {
      const Tensor& t = v.tensor;
      STRATA_CHECK(t.dim() == 3 && t.size(0) > 0 && t.size(1) == kChannels && t.size(2) >= 2, name_, ": ",
                   v.site().name, " must be [batch, 8, experts >= 2] router diagnostic sums, got ", t.shape().str());
      v.tensor = host_accumulation_copy(t);
    }
    return values;
  }
  MetricProgress start(std::vector<MetricTensor> prepared) const override {
    for (const MetricTensor& v : prepared)
      for (const RankRelation& r : v.relations)
        STRATA_CHECK(r.placement.kind != Placement::Kind::FlatShard, name_, ": ", v.site().name,
                     " cannot be a FlatShard on ", axis_name(r.axis), " (sequences are split by Partial or Shard)");
    return merge_partials(std::move(prepared),
                          [this](std::vector<MetricTensor> merged) { return reduce_layers(std::move(merged)); });
  }

 private:
  // Per layer: one contribution per (operation, value) from its sequences with valid tokens.
  MetricProgress reduce_layers(std::vector<MetricTensor> values) const;
  std::vector<MetricResult> results(const std::vector<std::string>& layers,
                                    const std::vector<std::vector<std::vector<double>>>& reduced, int64_t E) const;

  std::string name_;
  std::vector<Op> ops_;
  bool per_layer_, worst_layer_;
};

MetricProgress RouterDiagnosticMetric::reduce_layers(std::vector<MetricTensor> values) const {
  const std::vector<LabeledValues> layers = group_by_layer(std::move(values));
  if (layers.empty()) return {};
  const int64_t E = layers.front().values.front().tensor.size(2);
  std::vector<std::vector<LabeledValues>> per_op(ops_.size());  // [op][layer]
  for (const LabeledValues& layer : layers) {
    for (std::vector<LabeledValues>& g : per_op) g.push_back({layer.label, {}});
    for (const MetricTensor& v : layer.values) {
      STRATA_CHECK(v.tensor.size(2) == E, name_, ": ", v.site().name, " has ", v.tensor.size(2), " experts, ",
                   layers.front().values.front().site().name, " has ", E);
      const int64_t B = v.tensor.size(0);
      const std::vector<double> x = v.tensor.to_vector();
      std::vector<SequenceDiagnostics> seqs;
      for (int64_t j = 0; j < B; ++j)
        if (x[static_cast<size_t>((j * kChannels + lm::kSumValidTokens) * E)] > 0)
          seqs.push_back(normalize_sequence(&x[static_cast<size_t>(j * kChannels * E)], E));
      for (size_t o = 0; o < ops_.size(); ++o) {
        std::vector<double> c = empty_contribution(ops_[o], E);
        for (const SequenceDiagnostics& d : seqs) add_sequence(ops_[o], d, c);
        const Tensor t = Tensor::from_vector(c, {static_cast<int64_t>(c.size())}, v.tensor.dtype());
        per_op[o].back().values.push_back(v.with_tensor(t));
      }
    }
  }
  std::vector<std::string> labels;
  for (const LabeledValues& l : layers) labels.push_back(l.label);
  // reduced[op][layer]: the combined contribution after the reductions.
  auto reduced = std::make_shared<std::vector<std::vector<std::vector<double>>>>(
      ops_.size(), std::vector<std::vector<double>>(layers.size()));
  MetricProgress p;
  for (size_t o = 0; o < ops_.size(); ++o) {
    auto finalize = [reduced, o, labels](const std::string& label, const std::vector<double>& combined) {
      const size_t l = static_cast<size_t>(std::find(labels.begin(), labels.end(), label) - labels.begin());
      (*reduced)[o][l] = combined;
      return std::vector<MetricResult>{};
    };
    p.add(reduce_logically(std::move(per_op[o]), ops_[o].reduce_op(), finalize));
  }
  return then(std::move(p), [this, labels, reduced, E] { return results(labels, *reduced, E); });
}

std::vector<MetricResult> RouterDiagnosticMetric::results(const std::vector<std::string>& layers,
                                                          const std::vector<std::vector<std::vector<double>>>& reduced,
                                                          int64_t E) const {
  std::vector<MetricResult> out;
  if (per_layer_)
    for (size_t l = 0; l < layers.size(); ++l)
      for (size_t o = 0; o < ops_.size(); ++o)
        out.push_back({finalize_contribution(ops_[o], reduced[o][l], E), layers[l] + "/" + ops_[o].name});
  for (size_t o = 0; o < ops_.size(); ++o) {  // global: pooled sequences, or (global) the layers' mean
    const Op& op = ops_[o];
    double value = 0;
    if (op.aggregation == Ag::Global) {
      for (const std::vector<double>& c : reduced[o]) value += finalize_contribution(op, c, E);
      value /= static_cast<double>(layers.size());
    } else {
      std::vector<double> pooled = empty_contribution(op, E);
      for (const std::vector<double>& c : reduced[o])
        for (size_t i = 0; i < c.size(); ++i) pooled[i] = reduce_pair(op.reduce_op(), pooled[i], c[i]);
      value = finalize_contribution(op, pooled, E);
    }
    out.push_back({value, "global/" + op.name});
  }
  if (worst_layer_)
    for (const Op& op : ops_) {
      const size_t o = static_cast<size_t>(&op - ops_.data());
      double worst = reduce_identity(op.worst_is_min ? ReduceOp::Min : ReduceOp::Max);
      for (const std::vector<double>& c : reduced[o])
        worst = reduce_pair(op.worst_is_min ? ReduceOp::Min : ReduceOp::Max, worst, finalize_contribution(op, c, E));
      out.push_back({worst, "worst-layer/" + op.name});
    }
  return out;
}

std::vector<Op> health_operations() {
  return {{"seq-loss", St::SeqAuxLoss, Ag::Mean},
          {"seq-assignment-imbalance", St::AuxLoadImbalance, Ag::Mean},
          {"seq-score-imbalance", St::ScoreImbalance, Ag::Mean},
          {"global-batch-loss", St::GlobalBatchAuxLoss, Ag::Global},
          {"seq-global-loss-gap", St::SeqGlobalAuxLossGap, Ag::Global},
          {"global-aux-max-over-mean", St::AuxMaxOverMean, Ag::Global},
          {"global-actual-imbalance", St::ActualLoadImbalance, Ag::Global},
          {"global-actual-max-over-mean", St::ActualMaxOverMean, Ag::Global},
          {"topk-boundary-relative-margin", St::TopkBoundaryRelativeMargin, Ag::Mean, /*worst_is_min=*/true}};
}

std::vector<Op> seq_aux_operations() {
  return {{"loss-mean", St::SeqAuxLoss, Ag::Mean},
          {"loss-max", St::SeqAuxLoss, Ag::Max},
          {"assignment-imbalance-mean", St::AuxLoadImbalance, Ag::Mean},
          {"score-imbalance-mean", St::ScoreImbalance, Ag::Mean},
          {"imbalance-coupling-mean", St::ImbalanceCoupling, Ag::Mean},
          {"imbalance-alignment-mean", St::ImbalanceAlignment, Ag::Mean}};
}

std::vector<Op> routing_balance_operations() {
  return {{"actual-imbalance-mean", St::ActualLoadImbalance, Ag::Mean},
          {"actual-imbalance-max", St::ActualLoadImbalance, Ag::Max},
          {"aux-actual-tv-mean", St::AuxActualTv, Ag::Mean},
          {"topk-overlap-mean", St::AuxActualOverlap, Ag::Mean},
          {"topk-overlap-min", St::AuxActualOverlap, Ag::Min},
          {"aux-max-over-mean", St::AuxMaxOverMean, Ag::Mean},
          {"actual-max-over-mean", St::ActualMaxOverMean, Ag::Mean},
          {"actual-inactive-fraction", St::ActualInactiveFraction, Ag::Mean},
          {"global-actual-imbalance", St::ActualLoadImbalance, Ag::Global},
          {"global-aux-actual-tv", St::AuxActualTv, Ag::Global},
          {"global-aux-max-over-mean", St::AuxMaxOverMean, Ag::Global},
          {"global-actual-max-over-mean", St::ActualMaxOverMean, Ag::Global}};
}

std::vector<Op> expert_bias_operations() {
  return {{"mean", St::BiasMean, Ag::Mean},
          {"std", St::BiasStd, Ag::Mean},
          {"rms", St::BiasRms, Ag::Mean},
          {"range", St::BiasRange, Ag::Mean},
          {"abs-max", St::BiasAbsMax, Ag::Mean},
          {"score-correlation", St::BiasScoreCorrelation, Ag::Mean},
          {"aux-load-correlation", St::BiasAuxLoadCorrelation, Ag::Mean},
          {"actual-load-correlation", St::BiasActualLoadCorrelation, Ag::Mean}};
}

MetricFactory factory(std::string name, std::string summary, std::vector<Op> (*ops)(), bool per_layer,
                      bool worst_layer) {
  return {name, std::move(summary), [name, ops, per_layer, worst_layer] {
            return std::unique_ptr<TensorMetric>(new RouterDiagnosticMetric(name, ops(), per_layer, worst_layer));
          }};
}

}  // namespace

std::vector<MetricFactory> router_diagnostic_metric_factories() {
  return {factory("layer-router-health",
                  "router health: sequence and global-batch aux loss, imbalance, loss gap, top-k margin (global, "
                  "worst layer)",
                  health_operations, false, true),
          factory("layer-router-seq-aux-decomposition",
                  "per-sequence aux loss split into assignment imbalance, score imbalance and their coupling",
                  seq_aux_operations, true, false),
          factory("layer-router-routing-balance",
                  "dispatched vs unbiased top-k load: imbalance, total variation, overlap, inactive experts",
                  routing_balance_operations, true, false),
          factory("layer-router-expert-bias",
                  "expert-bias scale (mean, std, rms, range, abs max) and its correlation with scores and load",
                  expert_bias_operations, true, false)};
}

}  // namespace strata::tensor_metrics
