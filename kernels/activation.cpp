// Argument checks and device dispatch for kernels/activation.h.
#include "kernels/activation.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
void check_unary(const char* op, const Tensor& x, const Tensor& y) {
  check_args(op, {{"x", &x}, {"out", &y}});
  check_float(x, op, "x");
  check_same_dtype(x, y, op);
  STRATA_CHECK(x.numel() == y.numel(), op, ": x has ", x.numel(), " elements, out has ", y.numel());
}
void check_swiglu(const char* op, const Tensor& x, const Tensor& y) {
  check_args(op, {{"x", &x}, {"y", &y}});
  check_float(x, op, "x");
  check_same_dtype(x, y, op);
  STRATA_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, op, ": last dimension of x ", x.shape().str(), " must be even");
  STRATA_CHECK(y.numel() * 2 == x.numel() && y.size(-1) * 2 == x.size(-1), op, ": y ", y.shape().str(),
               " must be x ", x.shape().str(), " with the last dimension halved");
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
void swiglu_forward(const Tensor& x, const Tensor& y) {
  check_swiglu("swiglu_forward", x, y);
  STRATA_DEVICE_DISPATCH(x.device(), swiglu_forward(x, y));
}
void swiglu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_swiglu("swiglu_backward", x, dy);
  check_unary("swiglu_backward", x, dx);
  STRATA_DEVICE_DISPATCH(x.device(), swiglu_backward(x, dy, dx));
}

}  // namespace strata::kernels
