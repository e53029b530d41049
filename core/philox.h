// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11) keyed by (seed, stream id, global element index).
//
// Element i of a stream draws from counter block i/4 (uniform, bernoulli) or i/2 (normal), so any
// shard of a tensor draws exactly the numbers of its slice of the global tensor. The transforms
// to floats use only correctly rounded IEEE double operations (+ - * / sqrt) with explicit
// round-to-nearest intrinsics on the device (no FMA contraction) and our own log/cos series, so
// CPU and CUDA produce bit-identical numbers.
#pragma once
#include <cstdint>

#include "core/half.h"

namespace strata::philox {

struct Key {
  uint64_t seed = 0;
  uint64_t stream = 0;  // e.g. hash of (parameter name) or (step, micro-batch, layer, purpose)
};

struct Block {
  uint32_t v[4];
};

STRATA_HD uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Philox4x32 with 10 rounds on counter (block index, stream) and key (seed).
STRATA_HD Block philox4x32_10(uint64_t block_index, uint64_t stream, uint64_t seed) {
  uint32_t c0 = static_cast<uint32_t>(block_index), c1 = static_cast<uint32_t>(block_index >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
  }
  return Block{{c0, c1, c2, c3}};
}

// ---- correctly rounded double arithmetic without contraction --------------------------------
STRATA_HD double rn_add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
STRATA_HD double rn_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
STRATA_HD double rn_sub(double a, double b) { return rn_add(a, -b); }
STRATA_HD double rn_div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
STRATA_HD double rn_sqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}

// Natural log for x in (0, 1]: x = m·2^e with m in [1/√2, √2), log m = 2·atanh(s), s=(m-1)/(m+1).
STRATA_HD double det_log(double x) {
  uint64_t bits;
#if defined(__CUDA_ARCH__)
  bits = static_cast<uint64_t>(__double_as_longlong(x));
#else
  __builtin_memcpy(&bits, &x, 8);
#endif
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  uint64_t mbits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m;
#if defined(__CUDA_ARCH__)
  m = __longlong_as_double(static_cast<long long>(mbits));
#else
  __builtin_memcpy(&m, &mbits, 8);
#endif
  if (m > 1.4142135623730951) {
    m = rn_mul(m, 0.5);
    e += 1;
  }
  double s = rn_div(rn_sub(m, 1.0), rn_add(m, 1.0));
  double z = rn_mul(s, s);
  constexpr double c[12] = {1.0 / 23, 1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
                            1.0 / 11, 1.0 / 9,  1.0 / 7,  1.0 / 5,  1.0 / 3,  1.0};
  double p = c[0];
  for (int k = 1; k < 12; ++k) p = rn_add(rn_mul(p, z), c[k]);
  double log_m = rn_mul(rn_mul(2.0, s), p);
  return rn_add(rn_mul(static_cast<double>(e), 0.69314718055994531), log_m);
}

// cos(x), sin(x) for |x| <= pi/4 by Taylor series (Horner).
STRATA_HD double det_cos_small(double x) {
  double z = rn_mul(x, x);
  constexpr double c[9] = {1.0 / 6402373705728000.0, -1.0 / 20922789888000.0, 1.0 / 87178291200.0,
                            -1.0 / 479001600.0,       1.0 / 3628800.0,         -1.0 / 40320.0,
                            1.0 / 720.0,              -1.0 / 24.0,             1.0 / 2.0};
  // c holds 1/18!, -1/16!, ..., 1/2 (signs for the series in z, applied below)
  double p = c[0];
  for (int k = 1; k < 9; ++k) p = rn_add(rn_mul(p, z), c[k]);
  return rn_sub(1.0, rn_mul(p, z));
}
STRATA_HD double det_sin_small(double x) {
  double z = rn_mul(x, x);
  constexpr double c[9] = {1.0 / 355687428096000.0, -1.0 / 1307674368000.0, 1.0 / 6227020800.0,
                           -1.0 / 39916800.0,       1.0 / 362880.0,         -1.0 / 5040.0,
                           1.0 / 120.0,             -1.0 / 6.0,             1.0};
  double p = c[0];
  for (int k = 1; k < 9; ++k) p = rn_add(rn_mul(p, z), c[k]);
  return rn_mul(p, x);
}
STRATA_HD double det_floor(double x) {
#if defined(__CUDA_ARCH__)
  return ::floor(x);
#else
  return __builtin_floor(x);
#endif
}
// cos(2*pi*u) for any u, by exact reduction to an octant.
STRATA_HD double det_cos_2pi(double u) {
  double t = rn_sub(u, det_floor(rn_add(u, 0.5)));  // [-0.5, 0.5), exact for our inputs
  double a = t < 0 ? -t : t;                              // cos is even
  double sign = 1.0;
  if (a > 0.25) {
    a = rn_sub(0.5, a);
    sign = -1.0;
  }
  constexpr double two_pi = 6.283185307179586;
  if (a > 0.125) return sign * det_sin_small(rn_mul(two_pi, rn_sub(0.25, a)));
  return sign * det_cos_small(rn_mul(two_pi, a));
}

// ---- per-element draws ------------------------------------------------------------------------
// Uniform in [0, 1) with 24 random bits (exactly representable in float).
STRATA_HD float uniform(const Key& k, uint64_t index) {
  Block b = philox4x32_10(index >> 2, k.stream, k.seed);
  uint32_t x = b.v[index & 3];
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

// Standard normal (Box-Muller, cosine branch) in double, rounded by the caller.
STRATA_HD double normal_f64(const Key& k, uint64_t index) {
  Block b = philox4x32_10(index >> 1, k.stream, k.seed);
  int lane = static_cast<int>(index & 1) * 2;
  double u1 = rn_mul(rn_add(static_cast<double>(b.v[lane]), 0.5), 2.3283064365386963e-10);  // (0,1)
  double u2 = rn_mul(rn_add(static_cast<double>(b.v[lane + 1]), 0.5), 2.3283064365386963e-10);
  double r = rn_sqrt(rn_mul(-2.0, det_log(u1)));
  return rn_mul(r, det_cos_2pi(u2));
}

STRATA_HD double normal(const Key& k, uint64_t index, double mean, double std) {
  return rn_add(mean, rn_mul(std, normal_f64(k, index)));
}

// 1 with probability p (u < p), else 0.
STRATA_HD bool bernoulli(const Key& k, uint64_t index, float p) { return uniform(k, index) < p; }

// A stable 64-bit stream id from a string (FNV-1a), e.g. a canonical parameter name.
inline uint64_t stream_id(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}

}  // namespace strata::philox
