// Scalar cross-entropy formulas shared by the CPU and CUDA implementations (kernels/cross_entropy.h),
// so both backends evaluate the same expressions. S is the statistics type (float or double).
#pragma once
#include <cmath>

#include "core/half.h"

namespace strata::kernels::ce {

// Stage 3: loss from the (all-reduced) statistics; sum_exp == 0 marks an ignored row.
template <typename S> STRATA_HD S loss(S row_max, S sum_exp, S target_logit) {
  using std::log;
  return sum_exp == S(0) ? S(0) : log(sum_exp) + row_max - target_logit;
}

// Label-smoothing coefficients (Megatron): grad = p·dloss - on_target·[j == t]·dloss - uniform·dloss,
// with s = label_smoothing·K / (K - 1), on_target = 1 - s, uniform = s / K.
struct Smoothing {
  double on_target = 1.0;
  double uniform = 0.0;
  static Smoothing make(double label_smoothing, long long k) {
    Smoothing r;
    if (label_smoothing > 0.0) {
      double s = label_smoothing * static_cast<double>(k) / static_cast<double>(k - 1);
      r.on_target = 1.0 - s;
      r.uniform = s / static_cast<double>(k);
    }
    return r;
  }
};

// The local column of global target t for a shard starting at vocab_start with v columns, or -1.
STRATA_HD long long local_target(long long t, long long vocab_start, long long v) {
  long long c = t - vocab_start;
  return (t >= 0 && c >= 0 && c < v) ? c : -1;
}

}  // namespace strata::kernels::ce
