// The fingerprint of the CPU numerics a run used: the vector ISA path of Strata's own kernels
// (kernels/cpu/cpu_isa.h), the BLAS library, its version and its core type (the OpenBLAS kernel
// set, OPENBLAS_CORETYPE or auto-detected), and the compiler. Two runs of the same build and
// config with equal fingerprints give the same bits (docs/reproducibility.md); golden files
// record it (training/golden/golden_values.h) to choose the exact or the cross-platform comparison.
#pragma once
#include <string>

namespace strata::kernels::cpu {

struct CpuPlatform {
  std::string isa;           // "avx512" | "avx2" | "baseline"
  std::string blas;          // "OpenBLAS"
  std::string blas_version;  // "0.3.21"
  std::string blas_core;     // OpenBLAS's core name: "Haswell", "SkylakeX", "Zen", "Sandybridge" …
  std::string compiler;      // "GCC 12.2.0"

  // The fields that decide the bits: everything but the ISA path, whose results are identical
  // by construction and by test (tests/unit/test_cpu_isa.cpp).
  bool same_numerics(const CpuPlatform& other) const;
  // The first field that differs ("blas_core Zen vs SkylakeX"), or "" when none does.
  std::string difference(const CpuPlatform& other) const;
  // "blas_core=Zen isa=avx2 blas=OpenBLAS 0.3.21 compiler=GCC 12.2.0"
  std::string describe() const;
  // A file-name tag: "zen_avx2".
  std::string tag() const;
};

// This process's fingerprint.
CpuPlatform cpu_platform();

}  // namespace strata::kernels::cpu
