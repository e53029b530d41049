// `strata bench ops`: device report, op benchmarks (apps/strata/bench_ops.cpp) and, with --check,
// the op sweep against the CPU float64 reference (tests/sweep).
#include <cstdio>

#include "apps/strata/bench_ops.h"
#include "apps/strata/commands.h"
#include "core/device.h"
#include "sweep.h"

namespace strata::app {

void register_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* ops = bench->add_subcommand("ops", "device report, op benchmarks, and the op sweep with --check");
  struct Opts {
    bool check = false, quick = false;
    bool no_bench = false;
    std::string backend, filter, json, bench_json;
  };
  auto o = std::make_shared<Opts>();
  ops->add_flag("--check", o->check, "run the op sweep (every op x dtype x shape against the f64 CPU reference)");
  ops->add_flag("--quick", o->quick, "fewer and smaller shapes");
  ops->add_option("--backend", o->backend, "cpu or cuda (default: both where available)");
  ops->add_option("--filter", o->filter, "only ops whose name contains this");
  ops->add_option("--json", o->json, "write sweep results as JSON to this file");
  ops->add_flag("--no-bench", o->no_bench, "skip the op benchmarks");
  ops->add_option("--bench-json", o->bench_json, "write benchmark results as JSON to this file");
  add_runner(ops, [o] {
    std::printf("%s", device_report().c_str());
    int rc = 0;
    if (o->check) {
      sweep::Options so;
      so.quick = o->quick;
      so.filter = o->filter;
      so.json_out = o->json;
      if (!o->backend.empty()) so.backends = {o->backend};
      rc = sweep::run(so);
      if (rc == 77) rc = 0;
    }
    if (!o->no_bench) {
      BenchOpsOptions bo;
      bo.quick = o->quick;
      bo.json_out = o->bench_json;
      int brc = run_op_benchmarks(bo);
      if (rc == 0) rc = brc;
    }
    return rc;
  });
}

}  // namespace strata::app
