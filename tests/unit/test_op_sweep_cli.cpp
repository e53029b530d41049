// The op sweep's command line (sweep/sweep.h run_command_line, the strata_op_sweep binary), run
// in-process: --filter keeps the cases whose printed name contains it and fails when none does;
// --summary prints exactly one line when every case passes, and the failing case's table line
// before that line (exit 1) when one fails — forced by a case family registered here, which only
// this test binary has; bad arguments exit 2 with the usage.
#include <algorithm>
#include <string>
#include <vector>

#include "cli_test_helpers.h"
#include "sweep/sweep.h"
#include "test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using strata::test::CliResult;

namespace {

// One case that passes (the target equals the reference) and one that fails (it does not).
STRATA_SWEEP_OP("unit_test_forced", {DType::F32}, [](sweep::Context& c) {
  const Tensor ref = c.input(Shape{4}, 7);
  c.compare("passes", Shape{4}, c.on_target(ref), ref, c.bound(1e-6, 1e-2, 1e-3));
  c.compare("fails", Shape{4}, c.on_target(ref), Tensor::full(Shape{4}, 5.0, DType::F64), c.bound(1e-6, 1e-2, 1e-3));
});

CliResult run_sweep(std::vector<std::string> args) {
  return test::run_main(sweep::run_command_line, "strata_op_sweep", std::move(args));
}

size_t line_count(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("op sweep: --filter matches the printed names and fails when nothing matches", "[sweep]") {
  // "activation.gelu" is what the first column prints; only those cases run.
  CliResult r = run_sweep({"--quick", "--backend", "cpu", "--filter", "activation.gelu"});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("activation.gelu_tanh") && Contains("activation.gelu_erf"));
  CHECK_THAT(r.out, !Contains("activation.silu") && !Contains("softmax"));
  r = run_sweep({"--quick", "--backend", "cpu", "--filter", "activation.nosuch"});
  CHECK(r.rc == 2);
  CHECK_THAT(r.err, Contains("--filter 'activation.nosuch' matches no case"));
}

TEST_CASE("op sweep --summary: one line when every case passes", "[sweep]") {
  CliResult r = run_sweep({"--quick", "--summary", "--backend", "cpu", "--filter", "activation.gelu"});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK(line_count(r.out) == 1);
  CHECK_THAT(r.out, StartsWith("op sweep: ") && Contains(" cases passed on cpu (quick shapes"));
  CHECK(r.err.empty());
}

TEST_CASE("op sweep --summary: a failing case prints its line, then the summary, and exits 1", "[sweep]") {
  CliResult r = run_sweep({"--quick", "--summary", "--backend", "cpu", "--filter", "unit_test_forced."});
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK(line_count(r.out) == 3);  // the table header, the failing case, the summary
  CHECK_THAT(r.out, Contains("unit_test_forced.fails") && Contains("FAIL"));
  CHECK_THAT(r.out, !Contains("unit_test_forced.passes"));
  CHECK_THAT(r.out, Contains("op sweep: 1 of 2 cases FAILED on cpu"));
  // Without --summary the table has every case.
  r = run_sweep({"--quick", "--backend", "cpu", "--filter", "unit_test_forced."});
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, Contains("unit_test_forced.passes") && Contains("unit_test_forced.fails"));
}

TEST_CASE("op sweep: a bad argument exits 2 with the usage", "[sweep]") {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--check"},
                                               std::vector<std::string>{"--backend", "tpu"},
                                               std::vector<std::string>{"--filter"}}) {
    CliResult r = run_sweep(args);
    INFO(args[0] << ": " << r.err);
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Contains("strata_op_sweep: error: ") && Contains("usage: strata_op_sweep"));
  }
  CliResult r = run_sweep({"--help"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("--summary"));
}
