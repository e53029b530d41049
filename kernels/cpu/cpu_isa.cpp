// The process's CPU ISA path (kernels/cpu/cpu_isa.h): cpuid through GCC's __builtin_cpu_supports
// (which also checks that the OS saves the AVX / AVX-512 state), the STRATA_CPU_ISA override.
#include "kernels/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>

#include "core/error.h"

namespace strata::kernels::cpu {
namespace {

CpuIsa best_supported() {
  if (cpu_supports(CpuIsa::Avx512)) return CpuIsa::Avx512;
  if (cpu_supports(CpuIsa::Avx2)) return CpuIsa::Avx2;
  return CpuIsa::Baseline;
}

CpuIsa checked(CpuIsa isa, const std::string& what) {
  STRATA_CHECK_KIND(ErrorKind::Config, cpu_supports(isa), what, "=", cpu_isa_name(isa),
                    ": this CPU lacks that instruction set (it supports up to ", cpu_isa_name(best_supported()),
                    "); choose avx2, baseline or unset it");
  return isa;
}

CpuIsa resolve() {
  const char* env = std::getenv("STRATA_CPU_ISA");
  if (!env || !*env) return best_supported();
  return checked(parse_cpu_isa(env, "STRATA_CPU_ISA"), "STRATA_CPU_ISA");
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(resolve())};
  return slot;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Baseline: return "baseline";
  }
  return "?";
}

bool cpu_supports(CpuIsa isa) {
#ifdef STRATA_HAVE_ISA_PATHS
  switch (isa) {
    case CpuIsa::Avx512: return __builtin_cpu_supports("avx512f");
    case CpuIsa::Avx2: return __builtin_cpu_supports("avx2");
    case CpuIsa::Baseline: return true;
  }
  return false;
#else
  return isa == CpuIsa::Baseline;
#endif
}

CpuIsa parse_cpu_isa(const std::string& text, const std::string& what) {
  if (text == "avx512") return CpuIsa::Avx512;
  if (text == "avx2") return CpuIsa::Avx2;
  if (text == "baseline") return CpuIsa::Baseline;
  STRATA_THROW_KIND(ErrorKind::Config, what, "='", text, "' is not an ISA path; choose avx512, avx2 or baseline");
}

CpuIsa active_cpu_isa() { return static_cast<CpuIsa>(active_slot().load(std::memory_order_relaxed)); }

CpuIsa set_active_cpu_isa(CpuIsa isa) {
  checked(isa, "set_active_cpu_isa");
  return static_cast<CpuIsa>(active_slot().exchange(static_cast<int>(isa)));
}

}  // namespace strata::kernels::cpu
