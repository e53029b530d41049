// CPU activations (kernels/activation.h): storage type scalar_t, math in acc_t<scalar_t>.
#include "kernels/activation.h"

#include "kernels/activation_math.h"

namespace strata::kernels::cpu {
namespace {
// out[i] = f(in[i]) elementwise, f evaluated in the accumulation type.
template <typename F>
void map_unary(const Tensor& x, const Tensor& y, F f) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype(), "activation", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(y.data_ptr());
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; ++i) yp[i] = convert<scalar_t>(f(convert<acc>(xp[i])));
  });
}
template <typename F>
void map_grad(const Tensor& x, const Tensor& dy, const Tensor& dx, F grad) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype(), "activation backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    const scalar_t* dyp = static_cast<const scalar_t*>(dy.data_ptr());
    scalar_t* dxp = static_cast<scalar_t*>(dx.data_ptr());
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; ++i)
      dxp[i] = convert<scalar_t>(convert<acc>(dyp[i]) * grad(convert<acc>(xp[i])));
  });
}
}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y, GeluApprox approx) {
  if (approx == GeluApprox::Tanh) map_unary(x, y, [](auto v) { return act::gelu_tanh(v); });
  else map_unary(x, y, [](auto v) { return act::gelu_erf(v); });
}
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, GeluApprox approx) {
  if (approx == GeluApprox::Tanh) map_grad(x, dy, dx, [](auto v) { return act::gelu_tanh_grad(v); });
  else map_grad(x, dy, dx, [](auto v) { return act::gelu_erf_grad(v); });
}
void silu_forward(const Tensor& x, const Tensor& y) {
  map_unary(x, y, [](auto v) { return act::silu(v); });
}
void silu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  map_grad(x, dy, dx, [](auto v) { return act::silu_grad(v); });
}

void swiglu_forward(const Tensor& x, const Tensor& y) {
  const int64_t f = y.size(-1), rows = y.numel() / f;
  dispatch_float(x.dtype(), "swiglu_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(y.data_ptr());
#pragma omp parallel for if (rows * f > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < f; ++j) {
        acc a = convert<acc>(xp[r * 2 * f + j]), b = convert<acc>(xp[r * 2 * f + f + j]);
        yp[r * f + j] = convert<scalar_t>(act::silu(a) * b);
      }
  });
}

void swiglu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const int64_t f = dy.size(-1), rows = dy.numel() / f;
  dispatch_float(x.dtype(), "swiglu_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    const scalar_t* dyp = static_cast<const scalar_t*>(dy.data_ptr());
    scalar_t* dxp = static_cast<scalar_t*>(dx.data_ptr());
#pragma omp parallel for if (rows * f > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < f; ++j) {
        acc a = convert<acc>(xp[r * 2 * f + j]), b = convert<acc>(xp[r * 2 * f + f + j]);
        acc g = convert<acc>(dyp[r * f + j]);
        dxp[r * 2 * f + j] = convert<scalar_t>(g * b * act::silu_grad(a));
        dxp[r * 2 * f + f + j] = convert<scalar_t>(g * act::silu(a));
      }
  });
}

}  // namespace strata::kernels::cpu
