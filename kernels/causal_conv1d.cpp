// Argument checks and device dispatch for kernels/causal_conv1d.h.
#include "kernels/causal_conv1d.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
void check_conv(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_args(op, {{"x", &x}, {"w", &w}, {"bias", &bias}});
  check_float(x, op, "x");
  STRATA_CHECK(x.dim() == 3 && x.is_contiguous(), op, ": x must be a contiguous [b, l, C], got ", x.shape().str());
  const int64_t C = x.size(2);
  STRATA_CHECK(w.dim() == 2 && w.size(0) == C && w.size(1) >= 1, op, ": w is ", w.shape().str(), ", expected [",
               C, ", K]");
  STRATA_CHECK(bias.shape() == Shape{C}, op, ": bias is ", bias.shape().str(), ", expected [", C, "]");
  check_same_dtype(x, w, op);
  check_same_dtype(x, bias, op);
}
void check_like(const char* op, const char* name, const Tensor& t, const Shape& want) {
  STRATA_CHECK(t.shape() == want && t.is_contiguous(), op, ": ", name, " is ", t.shape().str(), ", expected ",
               want.str(), " (contiguous)");
}
}  // namespace

void causal_conv1d_silu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& history,
                                const Tensor& y, const Tensor& final_history) {
  const char* op = "causal_conv1d_silu_forward";
  check_conv(op, x, w, bias);
  check_like(op, "y", y, x.shape());
  check_same_dtype(x, y, op);
  const Shape hs{x.size(0), x.size(2), w.size(1) - 1};
  if (history.defined()) check_like(op, "history", history, hs), check_same_dtype(x, history, op);
  if (final_history.defined()) check_like(op, "final_history", final_history, hs);
  STRATA_DEVICE_DISPATCH(x.device(), causal_conv1d_silu_forward(x, w, bias, history, y, final_history));
}

void causal_conv1d_silu_backward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy,
                                 const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  const char* op = "causal_conv1d_silu_backward";
  check_conv(op, x, w, bias);
  check_like(op, "dy", dy, x.shape());
  check_like(op, "dx", dx, x.shape());
  check_same_dtype(x, dy, op);
  check_same_dtype(x, dx, op);
  check_like(op, "dw", dw, w.shape());
  check_like(op, "dbias", dbias, bias.shape());
  check_float(dw, op, "dw");
  check_float(dbias, op, "dbias");
  STRATA_DEVICE_DISPATCH(x.device(), causal_conv1d_silu_backward(x, w, bias, dy, dx, dw, dbias));
}

}  // namespace strata::kernels
