// `strata bench recompute` (apps/strata/bench_recompute.h).
#include "apps/strata/bench_recompute.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "models/config/recompute_config.h"
#include "training/planning/memory_plan.h"
#include "training/observability/metrics_log.h"
#include "training/run.h"

namespace strata::app {
namespace {

using nlohmann::json;

class StepSink : public MetricsSink {
 public:
  void add_scalar(const std::string& tag, double value, int64_t) override {
    if (tag == "iteration-time") ms.push_back(value * 1000.0);
  }
  std::vector<double> ms;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Variant {
  std::string name;
  ResolvedConfig cfg;
  int64_t planned_activations = 0;  // strata plan: the stage's activations under this mode; -1: none
  std::string plan_note;            // why there is no plan estimate
  std::vector<double> ms, peak;     // per repeat: median step time, allocator peak
  std::vector<double> losses;
};

struct RunResult {
  double median_ms = 0;
  int64_t peak_bytes = 0;
  std::vector<double> losses;
};

RunResult run_once(const ResolvedConfig& cfg, const BenchTrainOptions& o) {
  const Device device = resolve_device(cfg.training->device);
  StepSink sink;
  std::ostringstream quiet;
  training::RunHooks hooks;
  hooks.sinks = {&sink};
  hooks.log_stream = &quiet;
  reset_peak_memory_stats(device);
  const TrainResult r = training::run_training(cfg, hooks);
  STRATA_CHECK(r.exit_code == 0, "bench recompute: training exited with code ", r.exit_code);
  STRATA_CHECK(static_cast<int>(sink.ms.size()) == o.warmup + o.iters, "bench recompute: expected ",
               o.warmup + o.iters, " iteration times, got ", sink.ms.size());
  return {median(std::vector<double>(sink.ms.begin() + o.warmup, sink.ms.end())),
          memory_stats(device).max_allocated_bytes, r.losses};
}

Variant make_variant(const std::string& name, const BenchTrainOptions& base, const std::vector<std::string>& extra) {
  BenchTrainOptions o = base;
  o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
  Variant v{name, bench_config(o)};
  try {
    v.planned_activations = plan_layout(v.cfg).stages.front().memory.activations_configured;
  } catch (const Error& e) {  // a config the plan cannot count: the note says why
    v.planned_activations = -1;
    v.plan_note = e.what();
  }
  return v;
}

double mib(double b) { return b / 1048576.0; }

// The median over repeats of a / b, each repeat's pair measured back to back (load from other
// processes changes from repeat to repeat more than between neighbouring runs).
double median_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) r.push_back(a[i] / b[i]);
  return median(r);
}

void print_summary(const std::vector<Variant>& vs, int64_t tokens, const Variant* compare, int64_t compare_tokens) {
  const Variant& none = vs.front();
  const double base_peak = median(none.peak);
  std::printf("%-22s %10s %8s %12s %12s %14s %14s  %s\n", "mode", "ms/step", "ratio", "tokens/s", "peak MiB",
              "saved MiB", "plan act. MiB", "losses");
  for (const Variant& v : vs) {
    const double ms = median(v.ms), peak = median(v.peak);
    char plan[32] = "n/a";
    if (v.planned_activations >= 0) std::snprintf(plan, sizeof plan, "%.2f", mib(static_cast<double>(v.planned_activations)));
    std::printf("%-22s %10.1f %8.3f %12.0f %12.2f %14.2f %14s  %s\n", v.name.c_str(), ms, median_ratio(v.ms, none.ms),
                tokens * 1000.0 / ms, mib(peak), mib(base_peak - peak), plan,
                v.losses == none.losses ? "bit-identical" : "DIFFER");
  }
  if (none.planned_activations < 0) std::printf("  no plan estimate: %s\n", none.plan_note.c_str());
  std::printf("  (ms/step: median over repeats; ratio: median over repeats of the mode's step time over none's in the "
              "same repeat; saved = peak allocator bytes of none minus this mode's; plan act. = strata plan's "
              "activations of the stage under the mode; plan's saving for a mode = plan act. of none minus its)\n");
  if (compare) {
    const double a = tokens * 1000.0 / median(none.ms), b = compare_tokens * 1000.0 / median(compare->ms);
    std::printf("tokens/s %s (no recompute) %.0f vs %s %.0f (medians); ratio, median over repeats: %.3f\n",
                none.cfg.model->is_hybrid() ? "hybrid" : "model", a, compare->name.c_str(), b,
                median_ratio(compare->ms, none.ms) * static_cast<double>(tokens) / static_cast<double>(compare_tokens));
  }
}

json variant_json(const Variant& v, const Variant& none) {
  return {{"mode", v.name},
          {"recompute", recompute_mode_text(v.cfg.model)},
          {"median_ms", v.ms},
          {"peak_allocated_bytes", v.peak},
          {"time_ratio_to_none", median_ratio(v.ms, none.ms)},
          {"saved_bytes", median(none.peak) - median(v.peak)},
          {"planned_activation_bytes", v.planned_activations >= 0 ? json(v.planned_activations) : json(nullptr)},
          {"planned_saved_bytes", v.planned_activations >= 0 ? json(none.planned_activations - v.planned_activations)
                                                               : json(nullptr)},
          {"losses_identical_to_none", v.losses == none.losses}};
}

}  // namespace

std::vector<std::string> recompute_mode_overrides(const std::string& mode, int64_t layers) {
  const size_t colon = mode.find(':');
  const std::string kind = mode.substr(0, colon), arg = colon == std::string::npos ? "" : mode.substr(colon + 1);
  if (kind == "none" && arg.empty()) return {"model.recompute_granularity=null"};
  if (kind == "full_uniform" || kind == "full_block") {
    const std::string n = !arg.empty() ? arg : kind == "full_uniform" ? "1" : std::to_string(std::max<int64_t>(1, layers / 2));
    return {"model.recompute_granularity=full",
            std::string("model.recompute_method=") + (kind == "full_uniform" ? "uniform" : "block"),
            "model.recompute_num_layers=" + n};
  }
  if (kind == "selective" && !arg.empty())
    return {"model.recompute_granularity=selective", "model.recompute_modules=[" + arg + "]"};
  STRATA_THROW("bench recompute: --modes: '", mode, "' is not none, full_uniform[:n], full_block[:n] or "
               "selective:module[,module]");
}

int run_recompute_benchmark(const BenchRecomputeOptions& ro) {
  const BenchTrainOptions& o = ro.train;
  STRATA_CHECK(o.iters >= 1 && o.warmup >= 0 && o.repeat >= 1, "bench recompute: --iters >= 1, --warmup >= 0, --repeat >= 1");
  const ResolvedConfig base = bench_config(o);
  STRATA_CHECK(base.parallel->world_size.value_or(1) <= 1, "bench recompute: one process (run it without mpirun)");
  std::vector<std::string> modes = ro.modes;
  if (modes.empty()) modes = {"none", "full_uniform", "full_block", "selective:mlp"};
  STRATA_CHECK(modes.front() == "none", "bench recompute: --modes must start with none (the baseline), got '",
               modes.front(), "'");
  // Every mode is built (and validated, with the plan) before anything runs.
  std::vector<Variant> vs;
  for (const std::string& m : modes) vs.push_back(make_variant(m, o, recompute_mode_overrides(m, base.model->num_layers)));
  std::unique_ptr<Variant> compare;
  if (!ro.compare_config.empty()) {
    BenchTrainOptions c = o;
    c.config = ro.compare_config;
    c.overrides.clear();
    compare = std::make_unique<Variant>(make_variant(ro.compare_config, c, {}));
  }
  const auto tokens_of = [](const ResolvedConfig& c) {
    return c.training->global_batch_size.value_or(c.training->micro_batch_size) * c.model->seq_length;
  };
  std::printf("bench recompute: %s, %lld layers, %lld tokens/step, %d warm-up + %d timed steps, %d repeats, modes:",
              o.config.c_str(), (long long)base.model->num_layers, (long long)tokens_of(base), o.warmup, o.iters, o.repeat);
  for (const Variant& v : vs) std::printf(" %s (%s)", v.name.c_str(), recompute_mode_text(v.cfg.model).c_str());
  std::printf("%s%s\n", compare ? "; compared with " : "", compare ? ro.compare_config.c_str() : "");
  const size_t n = vs.size() + (compare ? 1 : 0);
  for (int rep = 0; rep < o.repeat; ++rep) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (k + static_cast<size_t>(rep)) % n;
      Variant& v = i < vs.size() ? vs[i] : *compare;
      const RunResult r = run_once(v.cfg, o);
      v.ms.push_back(r.median_ms);
      v.peak.push_back(static_cast<double>(r.peak_bytes));
      v.losses = r.losses;
      std::printf("  repeat %d: %-22s %9.1f ms/step  peak %9.2f MiB\n", rep + 1, v.name.c_str(), r.median_ms,
                  mib(static_cast<double>(r.peak_bytes)));
      std::fflush(stdout);
    }
  }
  print_summary(vs, tokens_of(base), compare.get(), compare ? tokens_of(compare->cfg) : 0);
  bool identical = true;
  json modes_json = json::array();
  for (const Variant& v : vs) {
    identical = identical && v.losses == vs.front().losses;
    modes_json.push_back(variant_json(v, vs.front()));
  }
  if (!o.json_out.empty()) {
    json j = {{"config", o.config}, {"tokens_per_step", tokens_of(base)}, {"modes", modes_json},
              {"losses_identical", identical}};
    if (compare)
      j["compare"] = {{"config", ro.compare_config},
                      {"median_ms", compare->ms},
                      {"tokens_per_second_ratio", median_ratio(compare->ms, vs.front().ms) *
                                                      static_cast<double>(tokens_of(base)) /
                                                      static_cast<double>(tokens_of(compare->cfg))}};
    std::ofstream f(o.json_out);
    STRATA_CHECK(f.good(), "bench recompute: cannot write --json ", o.json_out);
    f << j.dump(2) << "\n";
  }
  return identical ? 0 : 1;
}

}  // namespace strata::app
