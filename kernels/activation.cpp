// Argument checks and device dispatch for kernels/activation.h.
#include "kernels/activation.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
void check_unary(const char* op, const Tensor& x, const Tensor& y) {
  check_args(op, {{"x", &x}, {"out", &y}});
  check_float(x, op, "x");
  check_same_dtype(x, y, op);
  STRATA_CHECK(x.numel() == y.numel(), op, ": x has ", x.numel(), " elements, out has ", y.numel());
}
void check_glu(const char* op, const Tensor& x, const Tensor& y) {
  check_args(op, {{"x", &x}, {"y", &y}});
  check_float(x, op, "x");
  check_same_dtype(x, y, op);
  STRATA_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, op, ": last dimension of x ", x.shape().str(), " must be even");
  STRATA_CHECK(y.numel() * 2 == x.numel() && y.size(-1) * 2 == x.size(-1), op, ": y ", y.shape().str(),
               " must be x ", x.shape().str(), " with the last dimension halved");
}
void check_glu_options(const char* op, const GluOptions& o) {
  STRATA_CHECK(std::isfinite(o.linear_offset), op, ": linear_offset ", o.linear_offset, " is not finite");
  STRATA_CHECK(!o.clamp || (std::isfinite(*o.clamp) && *o.clamp > 0), op, ": clamp ", o.clamp.value_or(0.0),
               " must be finite and > 0");
}
// x [N, F] rows, weights [N] f32/f64.
void check_row_weights(const char* op, const Tensor& x, const Tensor& weights) {
  STRATA_CHECK(x.dim() == 2, op, ": x must be 2-D [rows, f], got ", x.shape().str());
  STRATA_CHECK(weights.dtype() == DType::F32 || weights.dtype() == DType::F64, op, ": weights must be f32 or f64, got ",
               dtype_name(weights.dtype()));
  STRATA_CHECK(weights.dim() == 1 && weights.size(0) == x.size(0), op, ": weights has shape ", weights.shape().str(),
               ", expected [", x.size(0), "]");
}
}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y, GeluApprox approx) {
  check_unary("gelu_forward", x, y);
  STRATA_DEVICE_DISPATCH(x.device(), gelu_forward(x, y, approx));
}
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, GeluApprox approx) {
  check_unary("gelu_backward", x, dy);
  check_unary("gelu_backward", x, dx);
  STRATA_DEVICE_DISPATCH(x.device(), gelu_backward(x, dy, dx, approx));
}
void silu_forward(const Tensor& x, const Tensor& y) {
  check_unary("silu_forward", x, y);
  STRATA_DEVICE_DISPATCH(x.device(), silu_forward(x, y));
}
void silu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_unary("silu_backward", x, dy);
  check_unary("silu_backward", x, dx);
  STRATA_DEVICE_DISPATCH(x.device(), silu_backward(x, dy, dx));
}
void glu_forward(const Tensor& x, const Tensor& y, const GluOptions& options) {
  check_glu("glu_forward", x, y);
  check_glu_options("glu_forward", options);
  STRATA_DEVICE_DISPATCH(x.device(), glu_forward(x, y, options));
}
void glu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const GluOptions& options) {
  check_glu("glu_backward", x, dy);
  check_unary("glu_backward", x, dx);
  check_glu_options("glu_backward", options);
  STRATA_DEVICE_DISPATCH(x.device(), glu_backward(x, dy, dx, options));
}
void squared_relu_forward(const Tensor& x, const Tensor& y) {
  check_unary("squared_relu_forward", x, y);
  STRATA_DEVICE_DISPATCH(x.device(), squared_relu_forward(x, y));
}
void squared_relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_unary("squared_relu_backward", x, dy);
  check_unary("squared_relu_backward", x, dx);
  STRATA_DEVICE_DISPATCH(x.device(), squared_relu_backward(x, dy, dx));
}
void weighted_squared_relu_forward(const Tensor& x, const Tensor& weights, const Tensor& y) {
  const char* op = "weighted_squared_relu_forward";
  check_args(op, {{"x", &x}, {"weights", &weights}, {"y", &y}});
  check_unary(op, x, y);
  check_row_weights(op, x, weights);
  STRATA_DEVICE_DISPATCH(x.device(), weighted_squared_relu_forward(x, weights, y));
}
void weighted_squared_relu_backward(const Tensor& x, const Tensor& weights, const Tensor& dy, const Tensor& dx,
                                    const Tensor& dweights) {
  const char* op = "weighted_squared_relu_backward";
  check_args(op, {{"x", &x}, {"weights", &weights}, {"dy", &dy}, {"dx", &dx}, {"dweights", &dweights}});
  check_unary(op, x, dy);
  check_unary(op, x, dx);
  check_row_weights(op, x, weights);
  check_same_dtype(weights, dweights, op);
  STRATA_CHECK(dweights.shape() == weights.shape(), op, ": dweights has shape ", dweights.shape().str(),
               ", expected ", weights.shape().str());
  STRATA_DEVICE_DISPATCH(x.device(), weighted_squared_relu_backward(x, weights, dy, dx, dweights));
}

}  // namespace strata::kernels
