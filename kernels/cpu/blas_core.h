// OpenBLAS's kernel choice on processors newer than the library. A DYNAMIC_ARCH OpenBLAS picks its
// kernels from CPUID when it loads; one that does not recognise the processor falls back to a
// generic core (Debian 12's OpenBLAS 0.3.21 on Intel's Emerald Rapids, family 6 model 207, runs its
// Prescott SSE3 kernels: SGEMM about 4.7x slower than the AVX-512 kernels the processor runs).
// The choice can only be changed before the library loads, through OPENBLAS_CORETYPE.
// Reference: OpenBLAS driver/others/dynamic.c (get_coretype, force_coretype).
#pragma once
#include <string>

namespace strata::kernels::cpu {

// The core type whose kernels this processor runs when OpenBLAS fell back to a generic one it does
// not need ("SkylakeX" with AVX-512 F/BW/DQ/VL, "Haswell" with AVX2 + FMA); "" when OpenBLAS's
// own choice stands (a core it recognised, or OPENBLAS_CORETYPE already set).
std::string capable_blas_core();

// Set by `strata`'s restart (apps/strata/main.cpp) to the core OpenBLAS had chosen.
inline constexpr const char* kBlasFallbackVariable = "STRATA_BLAS_FALLBACK";

// The sentence saying that this process runs the kernels its restart chose, or "" when it does not
// (`strata train` logs it; `strata bench ops` prints it under the numerics fingerprint).
std::string blas_core_restart_note();

}  // namespace strata::kernels::cpu
