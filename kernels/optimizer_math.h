// Scalar AdamW update shared by the CPU and CUDA implementations (kernels/optimizer.h), so both
// backends evaluate the same expression. Coefficients are computed once on the host in double
// and then cast to the math type T (float for f32 parameters, double for f64).
// Reference: PyTorch torch.optim.AdamW (_single_tensor_adamw), apex multi_tensor_adam ADAM_MODE_1.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace strata::kernels::adamw {

template <typename T>
struct Coeffs {
  T beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  T decay;         // 1 − lr · weight_decay · weight_decay_mult
  T step_size;     // lr / (1 − β1^step)
  T bc2_sqrt;      // sqrt(1 − β2^step)
  T grad_scale;
};

template <typename T>
inline Coeffs<T> make_coeffs(double lr, double beta1, double beta2, double eps, double weight_decay,
                             int64_t step, double weight_decay_mult, double grad_scale) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  Coeffs<T> c;
  c.beta1 = static_cast<T>(beta1);
  c.beta2 = static_cast<T>(beta2);
  c.one_minus_beta1 = static_cast<T>(1.0 - beta1);
  c.one_minus_beta2 = static_cast<T>(1.0 - beta2);
  c.eps = static_cast<T>(eps);
  c.decay = static_cast<T>(1.0 - lr * weight_decay * weight_decay_mult);
  c.step_size = static_cast<T>(lr / bc1);
  c.bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  c.grad_scale = static_cast<T>(grad_scale);
  return c;
}

// Updates m and v in place and returns the new parameter value.
template <typename T>
STRATA_HD T update(T p, T g, T& m, T& v, const Coeffs<T>& c) {
  using std::sqrt;
  g = g * c.grad_scale;
  p = p * c.decay;
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * g * g;
  const T denom = sqrt(v) / c.bc2_sqrt + c.eps;
  return p - c.step_size * m / denom;
}

}  // namespace strata::kernels::adamw
