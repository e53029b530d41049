// The training run's tensor metrics (see metric_observer.h).
// Reference: megatron/training/tensor_metrics/observer.py (TensorMetricObserver,
// _forward_rank_relations, _write_scalar_results), megatron/training/training.py (train_step).
#include "training/observability/tensor_metrics/metric_observer.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>

#include "core/error.h"
#include "core/phase_timer.h"

namespace strata::tensor_metrics {

namespace {

bool is_optimizer_kind(const std::string& k) { return k == "parameter" || k == "wgrad"; }

std::string shortest(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

}  // namespace

TensorMetricObserver::TensorMetricObserver(const std::vector<TensorMetricSpec>& specs,
                                           const std::vector<MetricFactory>& factories,
                                           std::unique_ptr<CollectiveRunner> runner, ForwardLayout forward,
                                           OptimizerSourceLayout optimizer_layout,
                                           const std::vector<LanguageModel*>& chunks)
    : runner_(std::move(runner)), forward_(forward), optimizer_layout_(optimizer_layout) {
  for (const TensorMetricSpec& spec : specs) {
    const auto f = std::find_if(factories.begin(), factories.end(), [&](const MetricFactory& x) { return x.name == spec.name; });
    STRATA_CHECK(f != factories.end(), "tensor metrics: unknown metric '", spec.name, "'");
    Scheduled s;
    s.spec = spec;
    s.metric = f->make();
    s.kinds = s.metric->source_kinds();
    STRATA_CHECK(!s.kinds.empty(), "tensor metrics: metric '", spec.name, "' reads no site kind");
    for (const std::string& k : s.kinds) {
      if (is_optimizer_kind(k)) {
        s.optimizer = true;
      } else {
        STRATA_CHECK(source_kind_from_name(k).has_value(), "tensor metrics: metric '", spec.name,
                     "' reads an unknown site kind '", k, "'");
        s.forward = true;
      }
    }
    metrics_.push_back(std::move(s));
  }
  prepared_.resize(metrics_.size());
  if (!chunks.empty())
    names_ = std::make_unique<CanonicalParameterNameMap>(chunks, optimizer_layout_.ep_rank, optimizer_layout_.ep);
}

TensorMetricObserver::~TensorMetricObserver() = default;

bool TensorMetricObserver::any_due(int64_t iteration) const {
  return std::any_of(metrics_.begin(), metrics_.end(), [&](const Scheduled& s) { return s.spec.due(iteration); });
}

SourceKinds TensorMetricObserver::kinds_for(const ObservationContext& c) {
  SourceKinds kinds;
  if (c.phase != ObservationPhase::Train) return kinds;
  for (const Scheduled& s : metrics_)
    if (s.forward && s.spec.due(c.iteration))
      for (const std::string& k : s.kinds)
        if (auto kind = source_kind_from_name(k)) kinds = kinds | SourceKinds{*kind};
  if (!kinds.empty()) observing_iteration_ = c.iteration;
  return kinds;
}

std::vector<RankRelation> TensorMetricObserver::forward_relations(const Observation& o, const std::string& kind) const {
  std::vector<RankRelation> rel;
  const bool sequence_sums = kind == "router_diagnostic_sums";  // additive over a sequence's shards
  if (forward_.tp > 1) {
    if (sequence_sums)
      rel.push_back({Axis::TP, forward_.sequence_parallel ? Placement::partial() : Placement::replica()});
    else
      rel.push_back({Axis::TP, o.tp_shard_dim ? Placement::shard(o.tp_shard_dim) : Placement::replica()});
  }
  if (forward_.cp > 1)
    rel.push_back({Axis::CP, sequence_sums ? Placement::partial() : Placement::shard(o.sequence_dim)});
  if (forward_.dp > 1) rel.push_back({Axis::DP, Placement::shard(o.batch_dim)});
  if (forward_.pp > 1) rel.push_back({Axis::PP, Placement::owned(forward_.pp_rank)});
  return rel;
}

void TensorMetricObserver::on_tensor(const Observation& o) {
  const ObservationContext& c = observation_context();
  if (c.phase != ObservationPhase::Train || c.iteration != observing_iteration_) return;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string kind = source_kind_name(o.kind);
  MetricTensor v;
  v.tensor = o.tensor;
  v.sites = {{std::string(o.owner) + "." + std::string(o.name), kind}};
  v.relations = forward_relations(o, kind);
  v.occurrence = occurrences_[v.sites.front().name]++;
  MetricExecutor exec(*runner_);
  for (size_t m = 0; m < metrics_.size(); ++m) {
    const Scheduled& s = metrics_[m];
    if (!s.forward || !s.spec.due(c.iteration)) continue;
    if (std::find(s.kinds.begin(), s.kinds.end(), kind) == s.kinds.end()) continue;
    for (MetricTensor& p : exec.prepare(*s.metric, {v})) prepared_[m].push_back(std::move(p));
  }
  forward_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void TensorMetricObserver::end_step(const ObservationContext& c) {
  if (c.phase != ObservationPhase::Train) return;
  for (auto& p : prepared_) p.clear();  // complete() ran, or the step ended early
  occurrences_.clear();
  observing_iteration_ = -1;
  forward_seconds_ = 0.0;
}

TensorMetricReport TensorMetricObserver::complete(int64_t iteration, const AdamWOptimizer& optimizer) {
  TensorMetricReport report;
  report.iteration = iteration + 1;
  if (!any_due(iteration)) return report;
  phase_timer::Scope timer("tensor-metrics");
  const auto t0 = std::chrono::steady_clock::now();
  MetricExecutor exec(*runner_);
  std::vector<const TensorMetric*> due;
  std::vector<std::vector<MetricTensor>> values;
  std::vector<MetricTensor> params, wgrads;
  for (size_t m = 0; m < metrics_.size(); ++m) {
    Scheduled& s = metrics_[m];
    if (!s.spec.due(iteration)) continue;
    std::vector<MetricTensor> v = std::move(prepared_[m]);
    prepared_[m].clear();
    for (const std::string& k : s.kinds) {
      if (!is_optimizer_kind(k)) continue;
      STRATA_CHECK(names_ != nullptr, "tensor metrics: '", s.spec.name, "' needs the model's parameters");
      std::vector<MetricTensor>& source = k == "parameter" ? params : wgrads;
      if (source.empty()) source = optimizer_values(optimizer, *names_, optimizer_layout_, k);
      for (MetricTensor& p : exec.prepare(*s.metric, source)) v.push_back(std::move(p));
    }
    due.push_back(s.metric.get());
    values.push_back(std::move(v));
  }
  params.clear(), wgrads.clear();
  exec.synchronize_owned(values, {Axis::EP, Axis::PP});
  const std::vector<std::vector<MetricResult>> results = exec.run(due, std::move(values));
  std::set<std::string> tags;
  for (size_t i = 0; i < due.size(); ++i)
    for (const MetricResult& r : results[i]) {
      std::string tag = "tensor-metrics/" + due[i]->name() + "/" + r.label;
      STRATA_CHECK(tags.insert(tag).second, "tensor metrics: the result tag ", tag, " appears twice");
      report.scalars.emplace_back(std::move(tag), r.value);
    }
  report.collectives = exec.collectives_issued();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.forward_seconds = forward_seconds_;
  return report;
}

std::string format_tensor_metrics_line(const TensorMetricReport& report) {
  std::string s = "tensor metrics at iteration " + std::to_string(report.iteration) + ": {";
  for (size_t i = 0; i < report.scalars.size(); ++i)
    s += (i ? ", '" : "'") + report.scalars[i].first + "': " + shortest(report.scalars[i].second);
  return s + "}";
}

void publish(const TensorMetricReport& report, const std::vector<MetricsSink*>& sinks, std::ostream* line_out) {
  if (report.scalars.empty()) return;
  if (sinks.empty()) {
    if (line_out) *line_out << format_tensor_metrics_line(report) << std::endl;
    return;
  }
  nlohmann::json rec = {{"iteration", report.iteration},
                        {"tensor-metrics-time", report.seconds},
                        {"tensor-metrics-forward-time", report.forward_seconds},
                        {"tensor-metrics-collectives", report.collectives}};
  for (const auto& [tag, value] : report.scalars) rec[tag] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json();
  for (MetricsSink* s : sinks) {
    for (const auto& [tag, value] : report.scalars) s->add_scalar(tag, value, report.iteration);
    s->write_record(rec);
    s->flush();
  }
}

}  // namespace strata::tensor_metrics
