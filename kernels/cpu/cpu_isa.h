// The ISA path of the CPU kernels' vector code, chosen once per process: the best the CPU has
// (AVX-512F, AVX2 or the x86-64 baseline), or the one named by STRATA_CPU_ISA (avx512 | avx2 |
// baseline; a path the CPU lacks is an error naming it). with_cpu_isa(body) runs body compiled
// for that path: each path is a `flatten` function with its own GCC target, so body and
// everything it calls inline is vectorized for that ISA. The vector code sums in fixed lanes
// (kernels/cpu/vector_math.h) and its files are built with -ffp-contract=off, so every path
// gives the same bits; tests/unit/test_cpu_isa.cpp checks it. docs/reproducibility.md.
#pragma once
#include <string>

namespace strata::kernels::cpu {

enum class CpuIsa { Baseline = 0, Avx2 = 1, Avx512 = 2 };

const char* cpu_isa_name(CpuIsa isa);  // "baseline", "avx2", "avx512"
bool cpu_supports(CpuIsa isa);
// The path in use: resolved on first call from STRATA_CPU_ISA, else the best supported one.
CpuIsa active_cpu_isa();
// Tests: switch the path (it must be supported) and return the previous one.
CpuIsa set_active_cpu_isa(CpuIsa isa);
// "avx512" → Avx512 …; anything else is an error naming `what` (e.g. "STRATA_CPU_ISA") and the choices.
CpuIsa parse_cpu_isa(const std::string& text, const std::string& what);

namespace isa_detail {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
template <typename Body>
__attribute__((target("avx512f"), flatten, noinline)) void run_avx512(const Body& body) { body(); }
template <typename Body>
__attribute__((target("avx2"), flatten, noinline)) void run_avx2(const Body& body) { body(); }
#define STRATA_HAVE_ISA_PATHS 1
#endif
template <typename Body>
__attribute__((flatten, noinline)) void run_baseline(const Body& body) { body(); }
}  // namespace isa_detail

// Runs body() compiled for active_cpu_isa().
template <typename Body>
inline void with_cpu_isa(const Body& body) {
#ifdef STRATA_HAVE_ISA_PATHS
  switch (active_cpu_isa()) {
    case CpuIsa::Avx512: return isa_detail::run_avx512(body);
    case CpuIsa::Avx2: return isa_detail::run_avx2(body);
    case CpuIsa::Baseline: break;
  }
#endif
  isa_detail::run_baseline(body);
}

}  // namespace strata::kernels::cpu
