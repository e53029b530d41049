// Op benchmarks for `strata bench ops`: throughput of the wrappers against a reference measured in
// the same run (raw library calls, device copy bandwidth), reported as ratios.
#pragma once
#include <functional>
#include <string>

#include "core/device.h"

namespace strata::app {

struct BenchOpsOptions {
  bool quick = false;     // small sizes (CI / CPU)
  std::string json_out;   // optional: machine-readable results
  std::string filter;     // only benchmarks whose printed op name contains this; none matching: exit 1
};
int run_op_benchmarks(const BenchOpsOptions& opts);

// Median milliseconds of fn over `iters` runs after `warmup` runs, timed with device events.
double median_ms(Device dev, int warmup, int iters, const std::function<void()>& fn);

}  // namespace strata::app
