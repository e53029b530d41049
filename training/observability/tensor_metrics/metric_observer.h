// The tensor metrics of a training run: logging.tensor_metrics "NAME:INTERVAL" specs, each metric
// due on 0-based iteration it iff (it + 1) % interval == 0. A StepObserver prepares the due
// metrics' forward observations at once; complete() adds the parameter / wgrad values and runs
// every due metric's reductions together; publish() writes the scalars. Read-only: losses are
// bit-identical with or without metrics.
// Reference: Megatron tensor_metrics/observer.py (PR #6650).
// Details (configuration, sources, relations per axis, output): docs/metrics.md.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "training/observability/metrics_log.h"
#include "training/observability/run_observers.h"
#include "training/observability/tensor_metrics/metric_specs.h"
#include "training/observability/tensor_metrics/optimizer_sources.h"

namespace strata::tensor_metrics {

struct ForwardLayout {
  int tp = 1, cp = 1, dp = 1, pp = 1, pp_rank = 0;
  bool sequence_parallel = false;
};

struct TensorMetricReport {
  int64_t iteration = 0;  // 1-based (the iteration the values are logged at)
  std::vector<std::pair<std::string, double>> scalars;  // (tag, value), configuration order
  double seconds = 0.0;        // in complete() (the `tensor-metrics` phase)
  double forward_seconds = 0.0;  // preparing the forward observations (host time; launch time on GPU)
  int64_t collectives = 0;     // issued by complete()
};

// Forward: on a training iteration where a forward metric is due, subscribes to the union of the
// due metrics' forward kinds; every observation (every micro-batch, every model chunk) becomes a
// MetricTensor with its site `<owner>.<name>` and forward relations (TP Shard(tp_shard_dim) or
// Replica; CP Shard(sequence_dim), except the router-diagnostic sums, Partial over CP and, under
// sequence parallelism, TP; DP Shard(batch_dim); PP Owned(stage)), prepared at once by each due
// metric (the observed tensor is not kept).
class TensorMetricObserver : public StepObserver {
 public:
  TensorMetricObserver(const std::vector<TensorMetricSpec>& specs, const std::vector<MetricFactory>& factories,
                       std::unique_ptr<CollectiveRunner> runner, ForwardLayout forward,
                       OptimizerSourceLayout optimizer_layout, const std::vector<LanguageModel*>& chunks);
  ~TensorMetricObserver() override;

  SourceKinds kinds_for(const ObservationContext& c) override;
  void on_tensor(const Observation& o) override;
  void end_step(const ObservationContext& c) override;

  bool any_due(int64_t iteration) const;
  // Collective: every rank calls it on every iteration (it returns at once when nothing is due).
  // Called by the trainer after the gradients are finalized and just before the optimizer step:
  // adds the parameter / wgrad values (optimizer_sources.h) for the due metrics that read them,
  // gives every rank of the Owned axes (ep, pp) the same list (placeholders), runs every due
  // metric's staged reductions together (one collective per (axis, op, dtype) per stage) and
  // returns the scalars tagged `tensor-metrics/<metric>/<label>`.
  TensorMetricReport complete(int64_t iteration, const AdamWOptimizer& optimizer);

 private:
  struct Scheduled {
    TensorMetricSpec spec;
    std::unique_ptr<TensorMetric> metric;
    std::vector<std::string> kinds;
    bool forward = false, optimizer = false;
  };
  std::vector<RankRelation> forward_relations(const Observation& o, const std::string& kind) const;
  std::vector<Scheduled> metrics_;
  std::unique_ptr<CollectiveRunner> runner_;
  ForwardLayout forward_;
  OptimizerSourceLayout optimizer_layout_;
  std::unique_ptr<CanonicalParameterNameMap> names_;
  std::vector<std::vector<MetricTensor>> prepared_;  // per metric, this iteration's forward values
  std::map<std::string, int64_t> occurrences_;
  int64_t observing_iteration_ = -1;
  double forward_seconds_ = 0.0;  // this iteration's on_tensor time
};

// With no sink, Megatron's one line "tensor metrics at iteration <i>: {tag: value, …}".
// TensorBoard scalars (tag, value, iteration) and one JSONL record {"iteration", tags…,
// "tensor-metrics-time", "tensor-metrics-forward-time", "tensor-metrics-collectives"} per report; with no sink, the line on `line_out` (may be null).
void publish(const TensorMetricReport& report, const std::vector<MetricsSink*>& sinks, std::ostream* line_out);
std::string format_tensor_metrics_line(const TensorMetricReport& report);

}  // namespace strata::tensor_metrics
