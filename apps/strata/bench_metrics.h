// `strata bench metrics`: what the tensor metrics cost a training step. In one command, the same
// run three ways, alternated `repeat` times so load from other processes hits all alike:
//   off      — no logging.tensor_metrics (no observer; every site a thread-local load and a branch);
//   not due  — the given metrics configured with an interval no step reaches (the observer asks
//              each step and installs nothing);
//   due      — the given metrics due at every step.
// Prints the median step time of each, the ratios not-due/off and due/off, the time inside the
// tensor-metrics phase and the collectives a due step adds. The targets: not due ≤ 0.5%
// over off, due ≤ 5% over off for a typical set.
#pragma once
#include <string>
#include <vector>

#include "apps/strata/bench_train.h"

namespace strata::app {

struct BenchMetricsOptions {
  BenchTrainOptions train;           // config, overrides, iters, warmup, repeat, json_out
  std::vector<std::string> metrics;  // metric names (no interval)
};

int run_metrics_benchmark(const BenchMetricsOptions& options);

}  // namespace strata::app
