// Op sweep driver (sweep/sweep.h): runs registered cases per backend × dtype, prints a
// table of normalized and max-abs errors (or a one-line summary), fails on any bound; and the
// command line of the `strata_op_sweep` binary (ggml's test-backend-ops is the model).
#include "sweep/sweep.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/random.h"

namespace strata::sweep {

std::vector<OpEntry>& registry() {
  static std::vector<OpEntry> r;
  return r;
}

Registrar::Registrar(const char* file, const char* name, std::vector<DType> dtypes, CaseFn fn)
    : Registrar(file, name, std::move(dtypes), "", std::move(fn)) {}

Registrar::Registrar(const char* file, const char* name, std::vector<DType> dtypes, const char* covers, CaseFn fn) {
  std::vector<std::string> names;
  std::istringstream in(covers);
  for (std::string fn_name; in >> fn_name;) names.push_back(fn_name);
  // __FILE__ as the compiler saw it (relative to the build directory): keep it from sweep/.
  std::string path = file;
  if (const size_t at = path.rfind("sweep/sweep"); at != std::string::npos) path = path.substr(at);
  registry().push_back({name, std::move(fn), std::move(dtypes), std::move(names), path});
}

void print_registry() {
  for (const OpEntry& op : registry()) {
    std::string dtypes, covers;
    for (DType dt : op.dtypes) dtypes += (dtypes.empty() ? "" : ",") + std::string(dtype_name(dt));
    for (const std::string& c : op.covers) covers += (covers.empty() ? "" : " ") + c;
    std::printf("%s\t%s\t%s\t%s\n", op.name.c_str(), dtypes.c_str(), op.file.c_str(), covers.c_str());
  }
}

double Context::bound(double f32, double bf16, double f16) const {
  switch (dtype) {
    case DType::BF16: return bf16;
    case DType::F16: return f16;
    default: return f32;
  }
}

Tensor Context::input(const Shape& shape, uint64_t seed, double low, double high) const {
  Tensor t = Tensor::empty(shape, DType::F64);
  fill_uniform(t, philox::Key{seed, 99}, low, high);
  return t.to(dtype).to(DType::F64);  // rounded to the dtype under test
}

void Context::compare(const std::string& what, const Shape& shape, const Tensor& got, const Tensor& ref,
                      double bnd) {
  Result r;
  r.op = current_op + (what.empty() ? "" : "." + what);
  if (!filter.empty() && r.op.find(filter) == std::string::npos) return;  // not a case the filter asks for
  r.backend = device.str();
  r.dtype = dtype_name(dtype);
  r.shape = shape.str();
  r.bound = bnd;
  std::vector<double> a = got.to_vector(), b = ref.to_vector();
  if (a.size() != b.size()) {
    r.note = "size mismatch";
  } else {
    double num = 0, den = 0, mx = 0;
    bool finite = true;
    for (size_t i = 0; i < a.size(); ++i) {
      double d = a[i] - b[i];
      if (!std::isfinite(a[i]) && std::isfinite(b[i])) finite = false;
      num += d * d;
      den += b[i] * b[i];
      mx = std::max(mx, std::abs(d));
    }
    r.normalized_error = std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
    r.max_abs_error = mx;
    r.passed = finite && r.normalized_error <= bnd;
    if (!finite) r.note = "non-finite output";
  }
  results->push_back(r);
}

namespace {
// Whether family `name`'s cases ("name.what") can contain `filter`: the filter lies inside the
// family name, names this family ("activation.gelu"), or names no family and so may lie inside
// any family's case names ("gelu": every family runs, compare() keeps the matching cases).
bool family_may_match(const std::string& name, const std::string& filter) {
  if (name.find(filter) != std::string::npos || filter.rfind(name + ".", 0) == 0) return true;
  for (const OpEntry& op : registry())
    if (filter.rfind(op.name + ".", 0) == 0) return false;  // it names another family
  return true;
}

std::string family_names() {
  std::string list;
  for (const OpEntry& op : registry()) list += (list.empty() ? "" : ", ") + op.name + ".*";
  return list;
}

// Every case of every family the filter may match, on one device, appended to `results`.
void run_cases_on(Device dev, const Options& opts, std::vector<Result>& results) {
  for (const OpEntry& op : registry()) {
    // The filter matches the printed case names ("activation.gelu_tanh.fwd"): a family runs
    // when a case of it could match and compare() keeps the matching cases.
    if (!opts.filter.empty() && !family_may_match(op.name, opts.filter)) continue;
    for (DType dt : op.dtypes) {
      if (dev.is_cpu() && dt == DType::F64) continue;  // the reference itself
      Context c;
      c.device = dev;
      c.dtype = dt;
      c.quick = opts.quick;
      c.results = &results;
      c.current_op = op.name;
      c.filter = opts.filter;
      try {
        op.run(c);
      } catch (const std::exception& e) {
        Result r;
        r.op = op.name;
        r.backend = dev.str();
        r.dtype = dtype_name(dt);
        r.note = std::string("exception: ") + e.what();
        results.push_back(r);
      }
    }
  }
}

void print_table_header() {
  std::printf("%-34s %-7s %-5s %-22s %12s %12s %10s  %s\n", "op", "backend", "dtype", "shape", "norm_err",
              "max_abs", "bound", "result");
}

void print_table_line(const Result& r) {
  std::printf("%-34s %-7s %-5s %-22s %12.3e %12.3e %10.1e  %s%s%s\n", r.op.c_str(), r.backend.c_str(),
              r.dtype.c_str(), r.shape.c_str(), r.normalized_error, r.max_abs_error, r.bound,
              r.passed ? "ok" : "FAIL", r.note.empty() ? "" : " ", r.note.c_str());
}

void write_json(const std::string& path, const std::vector<Result>& results) {
  nlohmann::json j = nlohmann::json::array();
  for (const Result& r : results)
    j.push_back({{"op", r.op}, {"backend", r.backend}, {"dtype", r.dtype}, {"shape", r.shape},
                 {"normalized_error", r.normalized_error}, {"max_abs_error", r.max_abs_error},
                 {"bound", r.bound}, {"passed", r.passed}, {"note", r.note}});
  std::ofstream(path) << j.dump(1) << "\n";
}

// The summary mode's report: the table lines of the failing cases (under the header), then one line.
// `skipped`: "cuda: <why it cannot run>" for each backend asked for that could not run.
void print_summary(const std::vector<Result>& results, int failed, const std::vector<std::string>& ran,
                   const std::vector<std::string>& skipped, bool quick) {
  std::string backends, skips;
  for (const std::string& b : ran) backends += (backends.empty() ? "" : " and ") + b;
  for (const std::string& s : skipped) skips += "; not run on " + s;
  if (ran.empty()) {
    std::string why;
    for (const std::string& s : skipped) why += (why.empty() ? "" : "; ") + s;
    std::printf("op sweep: no backend could run (%s)\n", why.c_str());
    return;
  }
  if (failed) {
    print_table_header();
    for (const Result& r : results)
      if (!r.passed) print_table_line(r);
  }
  const char* against = quick ? "quick shapes, against the f64 CPU reference" : "against the f64 CPU reference";
  if (failed)
    std::printf("op sweep: %d of %zu cases FAILED on %s (%s%s)\n", failed, results.size(), backends.c_str(),
                against, skips.c_str());
  else
    std::printf("op sweep: %zu cases passed on %s (%s%s)\n", results.size(), backends.c_str(), against,
                skips.c_str());
}
}  // namespace

int run(const Options& opts) {
  std::vector<Result> results;
  std::vector<std::string> ran, skipped;
  for (const std::string& backend : opts.backends) {
    Device dev = Device::cpu();
    if (backend == "cuda") {
      if (cuda_device_count() == 0) {
        skipped.push_back("cuda: " + cuda_unavailable_reason());
        if (!opts.summary) std::printf("SKIPPED backend cuda: %s\n", cuda_unavailable_reason().c_str());
        continue;
      }
      dev = Device::cuda(0);
    }
    ran.push_back(backend);
    run_cases_on(dev, opts, results);
  }
  int failed = 0;
  for (const Result& r : results)
    if (!r.passed) ++failed;
  if (!opts.json_out.empty()) write_json(opts.json_out, results);
  const bool no_match = !ran.empty() && !opts.filter.empty() && results.empty();
  if (opts.summary) {
    if (!no_match) print_summary(results, failed, ran, skipped, opts.quick);
  } else {
    print_table_header();
    for (const Result& r : results) print_table_line(r);
    std::printf("sweep: %zu passed, %d failed\n", results.size() - failed, failed);
  }
  if (ran.empty()) return 77;
  if (no_match) {
    std::fprintf(stderr, "sweep: error: --filter '%s' matches no case (the names printed in the first column: %s)\n",
                 opts.filter.c_str(), family_names().c_str());
    return 2;
  }
  return failed ? 1 : 0;
}

namespace {
constexpr const char* kUsage =
    "usage: strata_op_sweep [--list] [--quick] [--summary] [--backend cpu|cuda] [--filter NAME] [--json FILE]\n"
    "  every op x dtype x shape on a backend against the float64 CPU reference (default: cpu and cuda,\n"
    "  where a GPU is usable)\n"
    "  --list           the registered cases, their dtypes, files and the kernels:: functions each covers\n"
    "  --quick          fewer and smaller shapes\n"
    "  --summary        one line when every case passes; else the failing cases' lines, then that line\n"
    "  --backend B      cpu or cuda only\n"
    "  --filter NAME    only the cases whose printed name contains NAME (activation.gelu); none is an error\n"
    "  --json FILE      every case's result as JSON\n";

int usage_error(const std::string& why) {
  std::fprintf(stderr, "strata_op_sweep: error: %s\n%s", why.c_str(), kUsage);
  return 2;
}
}  // namespace

int run_command_line(int argc, char** argv) {
  Options opts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (a == "--list") {
      print_registry();
      return 0;
    }
    if (a == "--quick") opts.quick = true;
    else if (a == "--summary") opts.summary = true;
    else if (a == "--backend" && has_value) opts.backends = {argv[++i]};
    else if (a == "--filter" && has_value) opts.filter = argv[++i];
    else if (a == "--json" && has_value) opts.json_out = argv[++i];
    else if (a == "--backend" || a == "--filter" || a == "--json") return usage_error(a + " needs a value");
    else return usage_error("unknown argument '" + a + "'");
  }
  if (opts.backends.size() == 1 && opts.backends[0] != "cpu" && opts.backends[0] != "cuda")
    return usage_error("--backend '" + opts.backends[0] + "': choose cpu or cuda");
  return run(opts);
}

}  // namespace strata::sweep
