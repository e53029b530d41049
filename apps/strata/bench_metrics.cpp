// `strata bench metrics` (apps/strata/bench_metrics.h).
#include "apps/strata/bench_metrics.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/error.h"
#include "parallel/distributed.h"
#include "training/observability/metrics_log.h"
#include "training/run.h"

namespace strata::app {
namespace {

using nlohmann::json;

// Every iteration's time, and the tensor-metric records (time in the phase, collectives).
class MetricsBenchSink : public MetricsSink {
 public:
  void add_scalar(const std::string& tag, double value, int64_t) override {
    if (tag == "iteration-time") ms.push_back(value * 1000.0);
  }
  void write_record(const json& r) override {
    if (r.contains("tensor-metrics-time")) {
      phase_ms.push_back(r["tensor-metrics-time"].get<double>() * 1000.0);
      forward_ms.push_back(r.value("tensor-metrics-forward-time", 0.0) * 1000.0);
      collectives.push_back(r.value("tensor-metrics-collectives", 0.0));
      tags = 0;
      for (const auto& [k, v] : r.items()) tags += k.rfind("tensor-metrics/", 0) == 0 ? 1 : 0;
    }
  }
  std::vector<double> ms, phase_ms, forward_ms, collectives;
  int64_t tags = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct VariantResult {
  double median_ms = 0, phase_ms = 0, forward_ms = 0, collectives = 0;
  int64_t tags = 0;
  std::vector<double> losses;
};

VariantResult run_variant(const ResolvedConfig& base, const std::vector<std::string>& metrics, int64_t interval,
                          const BenchTrainOptions& o) {
  StrataConfig c = base.fields();
  c.logging.tensor_metrics.clear();
  for (const std::string& m : metrics) c.logging.tensor_metrics.push_back(m + ":" + std::to_string(interval));
  const ResolvedConfig cfg = c.validate(base.parallel->world_size);
  MetricsBenchSink sink;
  std::ostringstream quiet;
  training::RunHooks hooks;
  hooks.sinks = {&sink};
  hooks.log_stream = &quiet;
  const TrainResult r = training::run_training(cfg, hooks);
  STRATA_CHECK(r.exit_code == 0, "bench metrics: training exited with code ", r.exit_code);
  VariantResult v;
  v.losses = r.losses;
  if (sink.ms.empty()) return v;  // not the logging rank
  STRATA_CHECK(static_cast<int>(sink.ms.size()) == o.warmup + o.iters, "bench metrics: expected ",
               o.warmup + o.iters, " iteration times, got ", sink.ms.size());
  v.median_ms = median(std::vector<double>(sink.ms.begin() + o.warmup, sink.ms.end()));
  if (!sink.phase_ms.empty()) {
    v.phase_ms = median(std::vector<double>(sink.phase_ms.begin() + std::min<size_t>(o.warmup, sink.phase_ms.size() - 1),
                                            sink.phase_ms.end()));
    v.forward_ms = median(sink.forward_ms);
    v.collectives = sink.collectives.back();
    v.tags = sink.tags;
  }
  return v;
}

}  // namespace

int run_metrics_benchmark(const BenchMetricsOptions& mo) {
  const BenchTrainOptions& o = mo.train;
  STRATA_CHECK(!mo.metrics.empty(), "bench metrics: --metrics needs at least one metric name");
  STRATA_CHECK(o.iters >= 1 && o.warmup >= 0 && o.repeat >= 1, "bench metrics: --iters >= 1, --warmup >= 0, --repeat >= 1");
  const ResolvedConfig cfg = bench_config(o);
  for (const std::string& m : mo.metrics)
    STRATA_CHECK(m.find(':') == std::string::npos, "bench metrics: give metric names without an interval, got '", m, "'");
  // Checks the names (and that the model has their sites) before anything runs.
  {
    StrataConfig probe = cfg.fields();
    for (const std::string& m : mo.metrics) probe.logging.tensor_metrics.push_back(m + ":1");
    static_cast<void>(probe.validate(launched_world_size().value_or(1)));
  }
  std::printf("bench metrics: %s, %d warm-up + %d timed steps, %d repeats; metrics:", o.config.c_str(), o.warmup,
              o.iters, o.repeat);
  for (const std::string& m : mo.metrics) std::printf(" %s", m.c_str());
  std::printf("\n");
  // Under mpirun: MPI stays initialised across the runs (each run_training joins the same job).
  const DistributedRuntime session = init_distributed(*cfg.parallel, resolve_device(cfg.training->device));
  const int64_t never = std::numeric_limits<int32_t>::max();
  std::vector<double> off, idle, due, phase, forward, not_due_ratio, due_ratio;
  VariantResult last_due;
  bool identical = true;
  for (int rep = 0; rep < o.repeat; ++rep) {
    // The three runs in a rotating order, so that warm-up effects of the process hit each alike.
    VariantResult runs[3];
    for (int k = 0; k < 3; ++k) {
      const int v = (k + rep) % 3;
      runs[v] = run_variant(cfg, v == 0 ? std::vector<std::string>{} : mo.metrics, v == 1 ? never : 1, o);
    }
    const VariantResult &a = runs[0], &b = runs[1], &c = runs[2];
    identical = identical && a.losses == b.losses && a.losses == c.losses;
    if (a.median_ms == 0) continue;  // not the logging rank
    off.push_back(a.median_ms), idle.push_back(b.median_ms), due.push_back(c.median_ms), phase.push_back(c.phase_ms);
    forward.push_back(c.forward_ms);
    not_due_ratio.push_back(b.median_ms / a.median_ms), due_ratio.push_back(c.median_ms / a.median_ms);
    last_due = c;
    std::printf("  repeat %d: off %.2f ms/step, not due %.2f (x%.4f), due %.2f (x%.4f; tensor-metrics phase %.2f ms, "
                "forward prepare %.2f ms)\n",
                rep + 1, a.median_ms, b.median_ms, b.median_ms / a.median_ms, c.median_ms, c.median_ms / a.median_ms,
                c.phase_ms, c.forward_ms);
  }
  if (off.empty()) return identical ? 0 : 1;
  const double r_idle = median(not_due_ratio), r_due = median(due_ratio);
  std::printf("median over %zu repeats: not due / off = %.4f (%+.2f%%), due / off = %.4f (%+.2f%%), "
              "tensor-metrics phase %.2f ms and forward prepare %.2f ms of a %.2f ms due step; a due step adds %.0f "
              "collectives for %lld values\n",
              off.size(), r_idle, 100 * (r_idle - 1), r_due, 100 * (r_due - 1), median(phase), median(forward), median(due),
              last_due.collectives, static_cast<long long>(last_due.tags));
  std::printf("losses bit-identical off / not due / due: %s\n", identical ? "yes" : "NO");
  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    STRATA_CHECK(f.good(), "bench metrics: cannot write --json ", o.json_out);
    f << json{{"config", o.config},          {"metrics", mo.metrics},       {"off_ms", off},
              {"not_due_ms", idle},          {"due_ms", due},               {"phase_ms", phase},          {"forward_prepare_ms", forward},
              {"not_due_over_off", r_idle},  {"due_over_off", r_due},       {"collectives_per_due_step", last_due.collectives},
              {"values", last_due.tags},     {"losses_identical", identical}}
             .dump(2)
      << "\n";
  }
  return identical ? 0 : 1;
}

}  // namespace strata::app
