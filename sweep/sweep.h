// The op sweep (ggml test-backend-ops style): every op × dtype × shape on a target backend,
// compared with the float64 CPU reference computed from the same (dtype-rounded) inputs.
// Targets: "cpu" (low-precision CPU kernels against f64) and "cuda" (CUDA kernels against f64 CPU).
// Each op family registers its cases from sweep/sweep_<op>.cpp with STRATA_SWEEP_OP, naming
// the kernels:: functions each case covers (the op registry check, docs/architecture.md "tests/").
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace strata::sweep {

struct Result {
  std::string op, backend, dtype, shape;
  double normalized_error = 0, max_abs_error = 0, bound = 0;
  bool passed = false;
  std::string note;
};

struct Context {
  Device device;             // where the op under test runs
  DType dtype;               // its storage dtype
  bool quick = false;        // fewer / smaller shapes
  std::vector<Result>* results = nullptr;
  std::string current_op;
  std::string filter;        // record only cases whose printed name ("op.what") contains this

  // Error bound for this dtype: f32 / f64 bound, bf16 and f16 bounds.
  double bound(double f32, double bf16, double f16) const;
  // Random f64 CPU tensor rounded to the dtype under test (so the reference sees identical inputs).
  Tensor input(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) const;
  // Move an f64 reference input to the device and dtype under test.
  Tensor on_target(const Tensor& ref) const { return ref.to(dtype).to(device); }
  Tensor empty(const Shape& shape) const { return Tensor::empty(shape, dtype, device); }
  // Compare a target output with the f64 reference and record the case.
  void compare(const std::string& what, const Shape& shape, const Tensor& got, const Tensor& ref, double bound);
};

using CaseFn = std::function<void(Context&)>;
struct OpEntry {
  std::string name;
  CaseFn run;
  std::vector<DType> dtypes;  // dtypes the op supports
  // The public kernels:: functions (kernels/<op>.h) this case runs on the target and compares,
  // e.g. {"sum", "max"}; scripts/check_op_registry.py requires every public op to be covered.
  std::vector<std::string> covers;
  std::string file;  // the sweep_<op>.cpp that registered it: sweep/sweep_<op>.cpp
};

std::vector<OpEntry>& registry();
struct Registrar {
  Registrar(const char* file, const char* name, std::vector<DType> dtypes, CaseFn fn);
  // covers: space-separated kernels:: function names, e.g. "sum max sum_of_squares".
  Registrar(const char* file, const char* name, std::vector<DType> dtypes, const char* covers, CaseFn fn);
};

// One line per registered case, tab-separated: name, dtypes (comma-separated), file, covered
// functions (space-separated). `strata_op_sweep --list`; read by scripts/check_op_registry.py.
void print_registry();

// Runs every registered op on each available backend; `filter` keeps the cases whose printed name
// ("activation.gelu_tanh.fwd": family, case) contains it. Prints one table line per case, or with
// `summary` one line ("op sweep: N cases passed on cpu ...") preceded by the table lines of the
// failing cases, if any. Returns 0 when all cases pass, 1 on any failure, 2 when a filter matches
// no case, 77 when no backend could run.
struct Options {
  std::vector<std::string> backends = {"cpu", "cuda"};
  std::string filter;
  bool quick = false;
  bool summary = false;
  std::string json_out;  // optional path for machine-readable results
};
int run(const Options& opts);

// The op sweep's command line (the `strata_op_sweep` binary, apps/strata_op_sweep/main.cpp):
//   [--list] [--quick] [--summary] [--backend cpu|cuda] [--filter NAME] [--json FILE] [--help]
// Returns the exit status: run()'s, or 2 for a bad argument (usage on stderr).
int run_command_line(int argc, char** argv);

}  // namespace strata::sweep

#define STRATA_SWEEP_CONCAT2(a, b) a##b
#define STRATA_SWEEP_CONCAT(a, b) STRATA_SWEEP_CONCAT2(a, b)
// STRATA_SWEEP_OP("act", kFloat, "gelu_forward gelu_backward", [](strata::sweep::Context& c) { ... });
// The covers string (the kernels:: functions the case checks) may be left out for cases that
// check no kernels:: op (copy/cast, RNG, whole models).
#define STRATA_SWEEP_OP(name, dtypes, ...) \
  static ::strata::sweep::Registrar STRATA_SWEEP_CONCAT(strata_sweep_reg_, __LINE__)(__FILE__, name, dtypes, __VA_ARGS__)
