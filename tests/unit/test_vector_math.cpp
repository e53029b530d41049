// Tests of kernels/cpu/vector_math.h (the f32 fast paths' exp and fixed-lane reductions): exp_f32
// against f64 exp over its whole range (≤ 2 ulp) and at the special values; max/sum-exp/dot
// against f64 sums for lengths around the lane count; and the documented summation order
// (lanes in order, then the tail) reproduced by a scalar reference bit for bit; the row
// functions on every ISA path the CPU has equal the inline versions bit for bit.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/vector_math.h"
#include "test_helpers.h"

namespace strata {
namespace {
using namespace kernels::cpu::vmath;

// Distance in units in the last place of the float nearest to `exact`.
double ulps(float got, double exact) {
  const float e = static_cast<float>(exact);
  const double ulp = std::ldexp(1.0, std::ilogb(e) - 23);
  return std::abs(static_cast<double>(got) - exact) / ulp;
}

std::vector<float> wave(int64_t n, double amp, double phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(amp * std::sin(0.37 * i + phase));
  return v;
}
}  // namespace

TEST_CASE("vector_math: exp_f32 is within 2 ulp of exp over [-87.3, 88.3], special values", "[vector_math]") {
  double worst = 0;
  int64_t count = 0;
  for (double x = -87.3; x < 88.3; x += 0.000731) {
    const float xf = static_cast<float>(x);
    worst = std::max(worst, ulps(exp_f32(xf), std::exp(static_cast<double>(xf))));
    ++count;
  }
  INFO("points " << count << ", worst " << worst << " ulp");
  CHECK(worst <= 2.0);
  CHECK(exp_f32(0.0f) == 1.0f);
  CHECK(exp_f32(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(exp_f32(-100.0f) == 0.0f);
  CHECK(std::isinf(exp_f32(std::numeric_limits<float>::infinity())));
  CHECK(std::isinf(exp_f32(100.0f)));
  CHECK(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("vector_math: max, sum of exp and dot against f64 for lengths around the lane count", "[vector_math]") {
  for (int64_t n : {1, 2, 15, 16, 17, 33, 255, 256, 1000, 50304}) {
    INFO("n=" << n);
    const std::vector<float> x = wave(n, 6.0, 0.1), y = wave(n, 2.0, 0.7);
    double m = -1e300, se = 0, dot = 0, dot_abs = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
    for (int64_t i = 0; i < n; ++i) {
      se += std::exp(static_cast<double>(x[i]) - m);
      dot += static_cast<double>(x[i]) * y[i];
      dot_abs += std::abs(static_cast<double>(x[i]) * y[i]);
    }
    CHECK(max_f32(x.data(), n) == static_cast<float>(m));
    // Each lane sums ~n/16 positive terms: relative error ≲ (n/16 + 16)·2^-24 plus exp's 2 ulp.
    const double bound = (static_cast<double>(n) / 16 + 16 + 4) * std::ldexp(1.0, -24);
    CHECK(std::abs(sum_exp_f32(x.data(), n, static_cast<float>(m)) - se) <= bound * se);
    CHECK(std::abs(dot_f32(x.data(), y.data(), n) - dot) <= bound * dot_abs);
  }
  CHECK(sum_exp_f32(nullptr, 0, 0.0f) == 0.0f);
  CHECK(dot_f32(nullptr, nullptr, 0) == 0.0f);
}

TEST_CASE("vector_math: the summation order is lanes in order, then the tail (bitwise)", "[vector_math]") {
  for (int64_t n : {7, 16, 45, 1000}) {
    const std::vector<float> x = wave(n, 3.0, 0.3), y = wave(n, 1.5, 1.1);
    float lanes[kLanes] = {}, dl[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        lanes[l] += exp_f32(x[j + l] - 1.0f);
        dl[l] += x[j + l] * y[j + l];
      }
    float s = 0, d = 0;
    for (int l = 0; l < kLanes; ++l) {
      s += lanes[l];
      d += dl[l];
    }
    for (; j < n; ++j) {
      s += exp_f32(x[j] - 1.0f);
      d += x[j] * y[j];
    }
    const float got_s = sum_exp_f32(x.data(), n, 1.0f), got_d = dot_f32(x.data(), y.data(), n);
    CHECK(std::memcmp(&got_s, &s, sizeof s) == 0);
    CHECK(std::memcmp(&got_d, &d, sizeof d) == 0);
  }
}

}  // namespace strata

namespace strata {

// Every ISA path this CPU has (kernels/cpu/cpu_isa.h) runs the row functions; each must give the
// inline (baseline-compiled) versions' bits.
TEST_CASE("vector_math: the row functions equal the inline versions bit for bit on every ISA path",
          "[vector_math][determinism]") {
  using namespace kernels::cpu::vmath;
  using kernels::cpu::CpuIsa;
  const CpuIsa saved = kernels::cpu::active_cpu_isa();
  for (CpuIsa isa : {CpuIsa::Baseline, CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (!kernels::cpu::cpu_supports(isa)) continue;
    kernels::cpu::set_active_cpu_isa(isa);
    INFO("isa " << kernels::cpu::cpu_isa_name(isa));
    for (int64_t n : {1, 5, 16, 31, 256, 50304}) {
      INFO("n=" << n);
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(7.0 * std::sin(0.91 * i) + 0.001 * i);
      const float m = max_f32(x.data(), n);
      CHECK(row_max(x.data(), n) == m);
      const float s = row_sum_exp(x.data(), n, m), s_inline = sum_exp_f32(x.data(), n, m);
      CHECK(std::memcmp(&s, &s_inline, sizeof s) == 0);
      std::vector<float> dx(static_cast<size_t>(n)), in_place = x;
      row_softmax_grad(x.data(), dx.data(), n, m, 1.0f / s, 0.001f, 0.37f);
      row_softmax_grad(in_place.data(), in_place.data(), n, m, 1.0f / s, 0.001f, 0.37f);
      for (int64_t j = 0; j < n; ++j) {
        const float want = (exp_f32(x[j] - m) * (1.0f / s) - 0.001f) * 0.37f;
        CHECK(std::memcmp(&dx[j], &want, sizeof want) == 0);
      }
      CHECK(std::memcmp(dx.data(), in_place.data(), dx.size() * sizeof(float)) == 0);
    }
  }
  kernels::cpu::set_active_cpu_isa(saved);
}

}  // namespace strata
