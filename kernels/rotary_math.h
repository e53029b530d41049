// Rotary embedding scalar math shared by the CPU and CUDA implementations (kernels/rotary.h),
// so both backends evaluate the same expressions. A is float (f32/bf16/f16 tensors) or double.
// Reference: Megatron-Core RotaryEmbedding (inv_freq = 1 / base^(arange(0, dim, 2) / dim)).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace strata::kernels::rope {

using std::cos;
using std::pow;
using std::sin;

// Llama 3's frequency scaling (Megatron RotaryEmbedding._apply_scaling, --use-rope-scaling, with
// its fixed low_freq_factor 1, high_freq_factor 4 and original context 8192): a frequency whose
// wavelength 2π/f exceeds 8192 is divided by `factor`, one below 2048 is kept, and between the two
// f ↦ (1 − w)·f/factor + w·f with w = (8192/wavelength − 1) / 3.
STRATA_HD double llama3_scaled_inv_freq(double f, double factor) {
  const double kOriginalContext = 8192.0, kLowFreqFactor = 1.0, kHighFreqFactor = 4.0;
  const double wavelength = 2.0 * 3.14159265358979323846 / f;
  if (wavelength < kOriginalContext / kHighFreqFactor) return f;
  if (wavelength > kOriginalContext / kLowFreqFactor) return f / factor;
  const double w = (kOriginalContext / wavelength - kLowFreqFactor) / (kHighFreqFactor - kLowFreqFactor);
  return (1.0 - w) * f / factor + w * f;
}

// inv_freq[i] = base^(-2i/rot_dim), Llama-3 scaled when llama3_factor > 0, evaluated in double and
// rounded once to A, so that CPU and CUDA get the same value (single-precision pow may differ by an
// ulp between the two).
template <typename A> STRATA_HD A inv_freq(double base, int64_t i, int64_t rot_dim, double llama3_factor = 0.0) {
  double f = pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
  if (llama3_factor > 0.0) f = llama3_scaled_inv_freq(f, llama3_factor);
  return static_cast<A>(f);
}

// θ = position · inv_freq, in A (Megatron: torch.outer(seq.float(), inv_freq)); with a sequence-length
// interpolation factor f the position is first scaled by position_scale = 1/f, rounded to A
// (Megatron RotaryEmbedding.forward: seq *= 1 / seq_len_interpolation_factor). A scale of 1 leaves
// the product exact.
template <typename A> STRATA_HD A angle(int64_t position, A freq, A position_scale = A(1)) {
  return static_cast<A>(position) * position_scale * freq;
}

// Rotates the pair (a, b) by θ, or by -θ when inverse (the backward pass).
template <typename A> STRATA_HD void rotate(A& a, A& b, A cos_t, A sin_t, bool inverse) {
  const A s = inverse ? -sin_t : sin_t;
  const A ra = a * cos_t - b * s;
  const A rb = b * cos_t + a * s;
  a = ra;
  b = rb;
}

// Channel indices of pair i (i < rot_dim/2).
STRATA_HD int64_t pair_first(int64_t i, int64_t rot_dim, bool interleaved) { return interleaved ? 2 * i : i; }
STRATA_HD int64_t pair_second(int64_t i, int64_t rot_dim, bool interleaved) {
  return interleaved ? 2 * i + 1 : i + rot_dim / 2;
}

}  // namespace strata::kernels::rope
