// The row functions of kernels/cpu/vector_math.h, each compiled for AVX-512, AVX2 and the x86-64
// baseline (GCC target_clones: the loader picks the best the machine has). This file is built
// without FMA contraction (-ffp-contract=off, CMakeLists.txt), so every clone computes exactly
// the inline versions' values; only the vector width differs.
#include "kernels/cpu/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRATA_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define STRATA_ISA_CLONES
#endif

namespace strata::kernels::cpu::vmath {

STRATA_ISA_CLONES float row_max(const float* x, int64_t n) { return max_f32(x, n); }

STRATA_ISA_CLONES float row_sum_exp(const float* x, int64_t n, float m) { return sum_exp_f32(x, n, m); }

STRATA_ISA_CLONES void row_softmax_grad(const float* x, float* dx, int64_t n, float m, float inv, float uniform,
                                        float g) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dx[j] = (exp_f32(x[j] - m) * inv - uniform) * g;
}

}  // namespace strata::kernels::cpu::vmath
