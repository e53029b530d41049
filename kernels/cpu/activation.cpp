// CPU activations (kernels/activation.h): storage type scalar_t, math in acc_t<scalar_t> (the weighted
// squared ReLU: double when the rows or their weights are f64). The reference of kernels/cuda/activation.cu.
#include "kernels/activation.h"

#include <type_traits>

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

void glu_forward(const Tensor& x, const Tensor& y, const GluOptions& options) {
  const int64_t f = y.size(-1), rows = y.numel() / f;
  dispatch_float(x.dtype(), "glu_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const act::Glu<acc> glu = act::make_glu<acc>(options);
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(y.data_ptr());
#pragma omp parallel for if (rows * f > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < f; ++j) {
        acc a = convert<acc>(xp[r * 2 * f + j]), b = convert<acc>(xp[r * 2 * f + f + j]);
        yp[r * f + j] = convert<scalar_t>(glu.forward(a, b));
      }
  });
}

void glu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const GluOptions& options) {
  const int64_t f = dy.size(-1), rows = dy.numel() / f;
  dispatch_float(x.dtype(), "glu_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const act::Glu<acc> glu = act::make_glu<acc>(options);
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    const scalar_t* dyp = static_cast<const scalar_t*>(dy.data_ptr());
    scalar_t* dxp = static_cast<scalar_t*>(dx.data_ptr());
#pragma omp parallel for if (rows * f > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < f; ++j) {
        acc a = convert<acc>(xp[r * 2 * f + j]), b = convert<acc>(xp[r * 2 * f + f + j]), da, db;
        glu.backward(a, b, convert<acc>(dyp[r * f + j]), da, db);
        dxp[r * 2 * f + j] = convert<scalar_t>(da);
        dxp[r * 2 * f + f + j] = convert<scalar_t>(db);
      }
  });
}

void squared_relu_forward(const Tensor& x, const Tensor& y) {
  map_unary(x, y, [](auto v) { return act::squared_relu(v); });
}
void squared_relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  map_grad(x, dy, dx, [](auto v) { return act::squared_relu_grad(v); });
}

namespace {
// Calls f(TypeTag<scalar_t>{}, TypeTag<P>{}) for x's dtype and the f32/f64 row weights.
template <typename F>
void dispatch_weighted(const Tensor& x, const Tensor& weights, const char* op, F&& f) {
  dispatch_float(x.dtype(), op, [&](auto tag_) {
    if (weights.dtype() == DType::F64) f(tag_, TypeTag<double>{});
    else f(tag_, TypeTag<float>{});
  });
}
// Math in double when the rows or their weights are f64, else float.
template <typename T, typename P>
using weighted_acc_t = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<P, double>, double, float>;
}  // namespace

void weighted_squared_relu_forward(const Tensor& x, const Tensor& weights, const Tensor& y) {
  const int64_t n = x.size(0), f = x.size(1);
  dispatch_weighted(x, weights, "weighted_squared_relu_forward", [&](auto tag_, auto ptag) {
    STRATA_SCALAR(tag_);
    using P = typename decltype(ptag)::type;
    using acc = weighted_acc_t<scalar_t, P>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    const P* wp = static_cast<const P*>(weights.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(y.data_ptr());
#pragma omp parallel for if (n * f > 32768)
    for (int64_t r = 0; r < n; ++r) {
      const acc w = static_cast<acc>(wp[r]);
      for (int64_t j = 0; j < f; ++j) yp[r * f + j] = convert<scalar_t>(act::squared_relu(convert<acc>(xp[r * f + j])) * w);
    }
  });
}

void weighted_squared_relu_backward(const Tensor& x, const Tensor& weights, const Tensor& dy, const Tensor& dx,
                                    const Tensor& dweights) {
  const int64_t n = x.size(0), f = x.size(1);
  dispatch_weighted(x, weights, "weighted_squared_relu_backward", [&](auto tag_, auto ptag) {
    STRATA_SCALAR(tag_);
    using P = typename decltype(ptag)::type;
    using acc = weighted_acc_t<scalar_t, P>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    const scalar_t* dyp = static_cast<const scalar_t*>(dy.data_ptr());
    const P* wp = static_cast<const P*>(weights.data_ptr());
    scalar_t* dxp = static_cast<scalar_t*>(dx.data_ptr());
    P* dwp = static_cast<P*>(dweights.data_ptr());
#pragma omp parallel for if (n * f > 32768)
    for (int64_t r = 0; r < n; ++r) {
      const acc w = static_cast<acc>(wp[r]);
      acc dot = acc(0);
      for (int64_t j = 0; j < f; ++j) {  // dy[j] read before dx[j] is written (dx may alias dy)
        const acc v = convert<acc>(xp[r * f + j]), g = convert<acc>(dyp[r * f + j]);
        dot += act::squared_relu(v) * g;
        dxp[r * f + j] = convert<scalar_t>(g * w * act::squared_relu_grad(v));
      }
      dwp[r] = static_cast<P>(dot);
    }
  });
}

}  // namespace strata::kernels::cpu
