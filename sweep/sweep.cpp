// Op sweep driver (sweep/sweep.h): runs registered cases per backend × dtype, prints a
// table of normalized and max-abs errors, fails on any bound.
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
}  // namespace

int run(const Options& opts) {
  std::vector<Result> results;
  int backends_run = 0;
  for (const std::string& backend : opts.backends) {
    Device dev = Device::cpu();
    if (backend == "cuda") {
      if (cuda_device_count() == 0) {
        std::printf("SKIPPED backend cuda: %s\n", cuda_unavailable_reason().c_str());
        continue;
      }
      dev = Device::cuda(0);
    }
    ++backends_run;
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
  int failed = 0;
  std::printf("%-34s %-7s %-5s %-22s %12s %12s %10s  %s\n", "op", "backend", "dtype", "shape", "norm_err",
              "max_abs", "bound", "result");
  for (const Result& r : results) {
    if (!r.passed) ++failed;
    std::printf("%-34s %-7s %-5s %-22s %12.3e %12.3e %10.1e  %s%s%s\n", r.op.c_str(), r.backend.c_str(),
                r.dtype.c_str(), r.shape.c_str(), r.normalized_error, r.max_abs_error, r.bound,
                r.passed ? "ok" : "FAIL", r.note.empty() ? "" : " ", r.note.c_str());
  }
  if (!opts.json_out.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const Result& r : results)
      j.push_back({{"op", r.op}, {"backend", r.backend}, {"dtype", r.dtype}, {"shape", r.shape},
                   {"normalized_error", r.normalized_error}, {"max_abs_error", r.max_abs_error},
                   {"bound", r.bound}, {"passed", r.passed}, {"note", r.note}});
    std::ofstream(opts.json_out) << j.dump(1) << "\n";
  }
  std::printf("sweep: %zu passed, %d failed\n", results.size() - failed, failed);
  if (backends_run == 0) return 77;
  if (!opts.filter.empty() && results.empty()) {
    std::fprintf(stderr, "sweep: error: --filter '%s' matches no case (the names printed in the first column: %s)\n",
                 opts.filter.c_str(), family_names().c_str());
    return 2;
  }
  return failed ? 1 : 0;
}

}  // namespace strata::sweep
