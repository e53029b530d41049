// This process's CPU numerics fingerprint (kernels/cpu/cpu_platform.h): OpenBLAS reports its
// configuration ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64") and the core
// whose kernels it runs (openblas_get_corename, which honours OPENBLAS_CORETYPE).
#include "kernels/cpu/cpu_platform.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "kernels/cpu/cpu_isa.h"

namespace strata::kernels::cpu {
namespace {

std::string compiler_name() {
#if defined(__clang__)
  return std::string("Clang ") + __clang_version__;
#elif defined(__GNUC__)
  return "GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
         std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

// The second word of "OpenBLAS 0.3.21 DYNAMIC_ARCH …".
std::string openblas_version() {
  std::istringstream config(openblas_get_config());
  std::string name, version;
  config >> name >> version;
  return version;
}

}  // namespace

bool CpuPlatform::same_numerics(const CpuPlatform& o) const {
  return blas == o.blas && blas_version == o.blas_version && blas_core == o.blas_core && compiler == o.compiler;
}

std::string CpuPlatform::difference(const CpuPlatform& o) const {
  const std::pair<const char*, std::pair<std::string, std::string>> fields[] = {
      {"blas_core", {blas_core, o.blas_core}}, {"blas", {blas, o.blas}},
      {"blas_version", {blas_version, o.blas_version}}, {"compiler", {compiler, o.compiler}},
      {"isa", {isa, o.isa}}};
  for (const auto& [name, values] : fields)
    if (values.first != values.second) return std::string(name) + " " + values.first + " vs " + values.second;
  return "";
}

std::string CpuPlatform::describe() const {
  return "blas_core=" + blas_core + " isa=" + isa + " blas=" + blas + " " + blas_version + " compiler=" + compiler;
}

std::string CpuPlatform::tag() const {
  std::string t = blas_core + "_" + isa;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::isalnum(c) ? std::tolower(c) : '_'; });
  return t;
}

CpuPlatform cpu_platform() {
  CpuPlatform p;
  p.isa = cpu_isa_name(active_cpu_isa());
  p.blas = "OpenBLAS";
  p.blas_version = openblas_version();
  p.blas_core = openblas_get_corename();
  p.compiler = compiler_name();
  return p;
}

}  // namespace strata::kernels::cpu
