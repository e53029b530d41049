// Scalar activation formulas shared by the CPU and CUDA implementations (kernels/activation.h),
// so both backends evaluate the same expressions. T is float or double.
#pragma once
#include <cmath>

#include "core/half.h"

namespace strata::kernels::act {

using std::erf;
using std::exp;
using std::tanh;

template <typename T> STRATA_HD T gelu_tanh(T x) {
  const T k = T(0.7978845608028654);  // sqrt(2/pi)
  T inner = k * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh(inner));
}
template <typename T> STRATA_HD T gelu_tanh_grad(T x) {
  const T k = T(0.7978845608028654);
  T x2 = x * x;
  T inner = k * (x + T(0.044715) * x2 * x);
  T t = tanh(inner);
  T sech2 = T(1) - t * t;
  return T(0.5) * (T(1) + t) + T(0.5) * x * sech2 * k * (T(1) + T(3) * T(0.044715) * x2);
}
template <typename T> STRATA_HD T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + erf(x * T(0.7071067811865476)));
}
template <typename T> STRATA_HD T gelu_erf_grad(T x) {
  T cdf = T(0.5) * (T(1) + erf(x * T(0.7071067811865476)));
  T pdf = exp(T(-0.5) * x * x) * T(0.3989422804014327);  // 1/sqrt(2*pi)
  return cdf + x * pdf;
}
template <typename T> STRATA_HD T sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }
template <typename T> STRATA_HD T silu(T x) { return x * sigmoid(x); }
template <typename T> STRATA_HD T silu_grad(T x) {
  T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

}  // namespace strata::kernels::act
