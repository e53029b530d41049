// The frequencies and the cos/sin factor (mscale) that the rotary kernel (kernels/rotary.h) applies
// for a RotaryOptions, read back from the kernel itself: an f64 row with 1 at the first channel of
// each pair and 0 at the second, rotated at position 1, holds m·cos f_i and m·sin f_i, so
// f_i = atan2 and m = hypot of the two (test_rotary_yarn.cpp, test_hf_yarn.cpp).
#pragma once
#include <cmath>
#include <vector>

#include "core/tensor.h"
#include "kernels/rotary.h"

namespace strata::test {

struct RotaryProbe {
  std::vector<double> inv_freq;  // [d/2]
  double mscale = 0;
};

// d: the head dimension (all channels rotate: opt.rotary_percent is taken as given).
inline RotaryProbe probe_rotary(int64_t d, kernels::RotaryOptions opt) {
  const int64_t rot = kernels::rotary_dim(d, opt.rotary_percent), half = rot / 2;
  std::vector<double> unit(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < half; ++i) unit[static_cast<size_t>(opt.interleaved ? 2 * i : i)] = 1.0;
  opt.position_offset = 1;
  opt.positions = nullptr;
  const Tensor x = Tensor::from_vector(unit, {1, 1, 1, d}, DType::F64);  // [s, b, heads, d]
  Tensor y = Tensor::empty(x.shape(), DType::F64);                        // [s, b, heads, d]
  kernels::rotary_forward(x, y, opt);
  const std::vector<double> v = y.to_vector();
  RotaryProbe p;
  for (int64_t i = 0; i < half; ++i) {
    const double c = v[static_cast<size_t>(opt.interleaved ? 2 * i : i)];
    const double s = v[static_cast<size_t>(opt.interleaved ? 2 * i + 1 : i + half)];
    p.inv_freq.push_back(std::atan2(s, c));
    p.mscale = std::hypot(c, s);
  }
  return p;
}

}  // namespace strata::test
