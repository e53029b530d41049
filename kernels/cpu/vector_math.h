// Vectorizable f32 building blocks for the CPU kernels' f32 fast paths: an exp the compiler turns
// into SIMD code (no libm call), and fixed-lane reductions. The lane count is a constant (not
// the machine's vector width) and every lane is summed sequentially, then the lanes in order, so
// a result depends only on the input — not on the ISA the loop was compiled for, nor on the
// number of threads. The row functions at the end (kernels/cpu/vector_math.cpp) run on the
// process's ISA path (AVX-512, AVX2 or the baseline, kernels/cpu/cpu_isa.h); that file is
// built with -ffp-contract=off, so all three compute the same values as these inline versions.
// exp_f32: Cephes expf (Cody–Waite reduction x = n·ln2 + r, degree-5 polynomial for e^r,
// scaling by 2^n through the exponent bits); relative error < 2 ulp on [-87.3, 88.4], 0 below
// (exp underflows), +inf above, NaN for NaN. Reference: Cephes Math Library (expf.c),
// Eigen's pexp_float, llm.c's use of the compiler's vector expf.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace strata::kernels::cpu::vmath {

// Lanes of the fixed-lane reductions (a multiple of every x86/ARM f32 vector width).
inline constexpr int kLanes = 16;

__attribute__((always_inline)) inline float exp_f32(float x) {
  constexpr float kHi = 88.3762626647949f, kLo = -87.3365447505531f;
  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  // n = round(x / ln2) by the 1.5·2^23 trick (exact for |n| < 2^22), r = x − n·ln2 in two parts.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n, n in [-126, 127]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  y = y * scale;
  y = x < kLo ? 0.0f : y;
  y = x > kHi ? HUGE_VALF : y;
  return y;
}

// Max of x[0..n): lane maxima, then the lanes and the tail in order. NaN inputs may be skipped
// (as std::max skips them); callers that must propagate NaN get it from the later sums.
__attribute__((always_inline)) inline float max_f32(const float* x, int64_t n) {
  float m[kLanes];
  for (int l = 0; l < kLanes; ++l) m[l] = -HUGE_VALF;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
  float r = -HUGE_VALF;
  for (int l = 0; l < kLanes; ++l) r = m[l] > r ? m[l] : r;
  for (; j < n; ++j) r = x[j] > r ? x[j] : r;
  return r;
}

// Σ_j exp(x[j] − m) over x[0..n): each lane sums its elements in order, then the lanes in
// order, then the tail.
__attribute__((always_inline)) inline float sum_exp_f32(const float* x, int64_t n, float m) {
  float s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) s[l] += exp_f32(x[j + l] - m);
  float r = 0.0f;
  for (int l = 0; l < kLanes; ++l) r += s[l];
  for (; j < n; ++j) r += exp_f32(x[j] - m);
  return r;
}

// Σ_j a[j]·b[j] with the same fixed-lane order.
__attribute__((always_inline))
inline float dot_f32(const float* a, const float* b, int64_t n) {
  float s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) s[l] += a[j + l] * b[j + l];
  float r = 0.0f;
  for (int l = 0; l < kLanes; ++l) r += s[l];
  for (; j < n; ++j) r += a[j] * b[j];
  return r;
}

// Row functions (kernels/cpu/vector_math.cpp), one ISA clone per machine:
// max_f32 / sum_exp_f32 of a row,
float row_max(const float* x, int64_t n);
float row_sum_exp(const float* x, int64_t n, float m);
// and the softmax cross-entropy gradient of a row without its target column:
// dx[j] = (exp_f32(x[j] − m)·inv − uniform)·g. dx may be x (each element is read, then written).
void row_softmax_grad(const float* x, float* dx, int64_t n, float m, float inv, float uniform, float g);

}  // namespace strata::kernels::cpu::vmath
