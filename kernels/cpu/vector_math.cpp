// The row functions of kernels/cpu/vector_math.h, run on the process's ISA path (AVX-512, AVX2
// or the x86-64 baseline; kernels/cpu/cpu_isa.h). This file is built without FMA contraction
// (-ffp-contract=off, CMakeLists.txt), so every path computes exactly the inline versions'
// values; only the vector width differs.
#include "kernels/cpu/vector_math.h"

#include "kernels/cpu/cpu_isa.h"

namespace strata::kernels::cpu::vmath {

float row_max(const float* x, int64_t n) {
  float r = 0.0f;
  with_cpu_isa([&] { r = max_f32(x, n); });
  return r;
}

float row_sum_exp(const float* x, int64_t n, float m) {
  float r = 0.0f;
  with_cpu_isa([&] { r = sum_exp_f32(x, n, m); });
  return r;
}

void row_softmax_grad(const float* x, float* dx, int64_t n, float m, float inv, float uniform, float g) {
  with_cpu_isa([&] {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dx[j] = (exp_f32(x[j] - m) * inv - uniform) * g;
  });
}

}  // namespace strata::kernels::cpu::vmath
