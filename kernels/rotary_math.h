// Rotary embedding scalar math shared by the CPU and CUDA implementations (kernels/rotary.h),
// so both backends evaluate the same expressions. A is float (f32/bf16/f16 tensors) or double.
// Reference: Megatron-Core RotaryEmbedding (inv_freq = 1 / base^(arange(0, dim, 2) / dim)),
// yarn_rotary_pos_embedding.py (YarnRotaryEmbedding.get_emb, _yarn_linear_ramp_mask).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace strata::kernels {
struct RotaryOptions;
}  // namespace strata::kernels

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

// The frequency settings of RotaryOptions that inv_freq reads, with YaRN's correction range
// already resolved (freq_params, on the host).
struct FreqParams {
  double base = 10000.0;
  double llama3_factor = 0.0;              // > 0: Llama 3's scaling
  double yarn_factor = 0.0;                // > 0: YaRN's blend
  double yarn_low = 0.0, yarn_high = 0.0;  // the ramp's ends (Megatron _yarn_find_correction_range)
};

// The FreqParams of `opt` for rot_dim rotated channels (kernels/rotary.cpp): YaRN's correction
// range of beta_fast / beta_slow over rot_dim.
FreqParams freq_params(const RotaryOptions& opt, int64_t rot_dim);

// Megatron _yarn_linear_ramp_mask at index i: clamp((i − low) / (high − low), 0, 1), with high
// moved by 0.001 when the two ends are equal (its "prevent singularity").
STRATA_HD double yarn_ramp(int64_t i, double low, double high) {
  if (low == high) high += 0.001;
  const double r = (static_cast<double>(i) - low) / (high - low);
  return r < 0.0 ? 0.0 : (r > 1.0 ? 1.0 : r);
}

// YaRN's frequency i from the unscaled one f (extra): Megatron's inter·(1 − m) + extra·m with
// inter = f / factor and m = 1 − ramp, written f·(1 − ramp·(1 − 1/factor)): the same value in
// exact arithmetic, and exactly f when factor is 1.
STRATA_HD double yarn_inv_freq(double f, int64_t i, double factor, double low, double high) {
  return f * (1.0 - yarn_ramp(i, low, high) * (1.0 - 1.0 / factor));
}

// inv_freq[i] = base^(-2i/rot_dim), Llama-3 scaled when llama3_factor > 0 or YaRN-blended when
// yarn_factor > 0, evaluated in double and rounded once to A, so that CPU and CUDA get the same
// value (single-precision pow may differ by an ulp between the two).
template <typename A> STRATA_HD A inv_freq(const FreqParams& p, int64_t i, int64_t rot_dim) {
  double f = pow(p.base, -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
  if (p.llama3_factor > 0.0) f = llama3_scaled_inv_freq(f, p.llama3_factor);
  if (p.yarn_factor > 0.0) f = yarn_inv_freq(f, i, p.yarn_factor, p.yarn_low, p.yarn_high);
  return static_cast<A>(f);
}

// θ = position · inv_freq, in A (Megatron: torch.outer(seq.float(), inv_freq)); with a sequence-length
// interpolation factor f the position is first scaled by position_scale = 1/f, rounded to A
// (Megatron RotaryEmbedding.forward: seq *= 1 / seq_len_interpolation_factor). A scale of 1 leaves
// the product exact.
template <typename A> STRATA_HD A angle(int64_t position, A freq, A position_scale = A(1)) {
  return static_cast<A>(position) * position_scale * freq;
}

// Rotates the pair (a, b) by θ, or by -θ when inverse (the backward pass); cos_t and sin_t carry
// the mscale factor when there is one (m·cos θ, m·sin θ).
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
