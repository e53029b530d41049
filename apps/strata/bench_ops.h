// Op benchmarks for `strata bench ops`: throughput of the wrappers against a reference measured in
// the same run (raw library calls, device copy bandwidth), reported as ratios.
#pragma once
#include <string>

namespace strata::app {

struct BenchOpsOptions {
  bool quick = false;     // small sizes (CI / CPU)
  std::string json_out;   // optional: machine-readable results
};
int run_op_benchmarks(const BenchOpsOptions& opts);

}  // namespace strata::app
