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

// inv_freq[i] = base^(-2i/rot_dim), evaluated in double and rounded once to A, so that CPU and
// CUDA get the same value (single-precision pow may differ by an ulp between the two).
template <typename A> STRATA_HD A inv_freq(double base, int64_t i, int64_t rot_dim) {
  return static_cast<A>(pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim)));
}

// θ = position · inv_freq, in A (Megatron: torch.outer(seq.float(), inv_freq)).
template <typename A> STRATA_HD A angle(int64_t position, A freq) { return static_cast<A>(position) * freq; }

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
