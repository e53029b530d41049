// Which OpenBLAS core a processor runs when OpenBLAS did not recognise it (kernels/cpu/blas_core.h).
#include "kernels/cpu/blas_core.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>

namespace strata::kernels::cpu {
namespace {

// OpenBLAS's generic x86-64 cores (no AVX2), as openblas_get_corename spells them: its fallbacks
// for a processor it does not know.
bool is_generic_core(std::string_view core) {
  constexpr std::array<std::string_view, 7> kGeneric = {"Prescott", "Core2", "Penryn",     "Dunnington",
                                                        "Nehalem",  "Atom",  "Sandybridge"};
  return std::find(kGeneric.begin(), kGeneric.end(), core) != kGeneric.end();
}

}  // namespace

std::string capable_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
  if (!is_generic_core(openblas_get_corename())) return "";
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

std::string blas_core_restart_note() {
  const char* was = std::getenv(kBlasFallbackVariable);
  const char* now = std::getenv("OPENBLAS_CORETYPE");
  if (!was || !now) return "";
  return std::string("OpenBLAS did not recognise this processor and chose its generic ") + was +
         " kernels; strata restarted itself with OPENBLAS_CORETYPE=" + now +
         ", kernels the processor runs (set OPENBLAS_CORETYPE yourself to choose)";
}

}  // namespace strata::kernels::cpu
