// Argument checks and device dispatch for kernels/softmax.h.
#include "kernels/softmax.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
void check_softmax(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                   const SoftmaxOptions& opt) {
  check_float(a, op, a_name);
  check_same_dtype(a, b, op);
  STRATA_CHECK(a.dim() >= 1 && a.size(-1) >= 1, op, ": ", a_name, " ", a.shape().str(),
               " must have a non-empty last dimension");
  STRATA_CHECK(b.shape() == a.shape(), op, ": ", b_name, " has shape ", b.shape().str(), ", expected ",
               a.shape().str(), " (the shape of ", a_name, ")");
  STRATA_CHECK(std::isfinite(opt.scale), op, ": scale must be finite, got ", opt.scale);
  if (opt.causal)
    STRATA_CHECK(a.dim() >= 2 && a.size(-1) == a.size(-2), op, ": causal softmax needs a square [..., s, s] input, got ",
                 a.shape().str());
}
}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxOptions& opt) {
  const char* op = "softmax_forward";
  check_args(op, {{"x", &x}, {"y", &y}});
  check_softmax(op, x, "x", y, "y", opt);
  STRATA_DEVICE_DISPATCH(x.device(), softmax_forward(x, y, opt));
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, const SoftmaxOptions& opt) {
  const char* op = "softmax_backward";
  check_args(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}});
  check_softmax(op, y, "y", dy, "dy", opt);
  check_softmax(op, y, "y", dx, "dx", opt);
  STRATA_DEVICE_DISPATCH(y.device(), softmax_backward(y, dy, dx, opt));
}

}  // namespace strata::kernels
