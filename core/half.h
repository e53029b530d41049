// 16-bit float storage types (bfloat16, IEEE half) with round-to-nearest-even conversions that
// give the same bits on host and device. Layout-compatible with __nv_bfloat16 / __half, so CUDA
// kernels may reinterpret_cast pointers. Arithmetic is done by converting to float.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__ __forceinline__
#else
#define STRATA_HD inline
#endif

namespace strata {

STRATA_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
STRATA_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

struct alignas(2) bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  STRATA_HD explicit bfloat16(float f) : bits(from_float(f)) {}
  STRATA_HD explicit bfloat16(double d) : bits(from_float(static_cast<float>(d))) {}
  STRATA_HD operator float() const { return bits_float(static_cast<uint32_t>(bits) << 16); }
  STRATA_HD static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
  STRATA_HD static bfloat16 from_bits(uint16_t b) { bfloat16 h; h.bits = b; return h; }
};

struct alignas(2) float16 {
  uint16_t bits = 0;
  float16() = default;
  STRATA_HD explicit float16(float f) : bits(from_float(f)) {}
  STRATA_HD explicit float16(double d) : bits(from_float(static_cast<float>(d))) {}
  STRATA_HD operator float() const { return to_float(bits); }
  STRATA_HD static float16 from_bits(uint16_t b) { float16 h; h.bits = b; return h; }

  // IEEE binary16 <-> binary32, round to nearest even, with subnormals, inf and NaN.
  STRATA_HD static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (abs < 0x38800000u) {  // result is subnormal or zero: value * 2^24 rounded
      if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
      uint32_t exp = abs >> 23;
      uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126u - exp;  // 14 - (exp - 127) + 13 - 1 ... yields mant >> (shift)
      // value = mant * 2^(exp-150); half subnormal unit = 2^-24 -> q = mant * 2^(exp-126)
      uint32_t q = mant >> shift;
      uint32_t rem = mant & ((1u << shift) - 1u);
      uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (q & 1u))) ++q;
      return static_cast<uint16_t>(sign | q);
    }
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits
    uint32_t h = ((rounded >> 13) - (112u << 10));       // rebias exponent 127 -> 15
    return static_cast<uint16_t>(sign | h);
  }
  STRATA_HD static float to_float(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      if (mant == 0) return bits_float(sign);
      // subnormal: normalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      return bits_float(sign | ((112u - e) << 23) | (mant << 13));
    }
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2, "16-bit storage types");

// Conversions used by templated kernels: every storage type converts to and from float/double.
template <typename T> STRATA_HD float to_f32(T v) { return static_cast<float>(v); }
template <typename T> STRATA_HD T from_f32(float v) { return static_cast<T>(v); }
template <> STRATA_HD bfloat16 from_f32<bfloat16>(float v) { return bfloat16(v); }
template <> STRATA_HD float16 from_f32<float16>(float v) { return float16(v); }

// Accumulation type: float for 16-bit and 32-bit storage, double for double.
template <typename T> struct AccType { using type = float; };
template <> struct AccType<double> { using type = double; };
template <typename T> using acc_t = typename AccType<T>::type;

// Convert any supported storage type to/from the accumulation type of another.
// A float converts to an integer type by truncation to int64, then modulo 2^bits: -7.0 -> u8 249,
// as numpy and PyTorch on the CPU give, on the host and the GPU alike (a direct float -> unsigned
// conversion of a negative value is undefined, and the GPU's saturates to 0).
template <typename To, typename From> STRATA_HD To convert(From v) {
  if constexpr (std::is_same_v<To, bfloat16> || std::is_same_v<To, float16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<From, bfloat16> || std::is_same_v<From, float16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> && std::is_floating_point_v<From>) {
    return static_cast<To>(static_cast<int64_t>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace strata
