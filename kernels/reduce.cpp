// Argument checks and device dispatch for kernels/reduce.h.
#include "kernels/reduce.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
// x: any float tensor; out: one element of an allowed dtype on x's device.
void check_scalar_reduction(const char* op, const Tensor& x, const Tensor& out, bool allow_i64) {
  check_args(op, {{"x", &x}, {"out", &out}});
  check_float(x, op, "x");
  STRATA_CHECK(out.numel() == 1, op, ": out must have exactly 1 element, got shape ", out.shape().str());
  const DType o = out.dtype();
  STRATA_CHECK(o == DType::F32 || o == DType::F64 || (allow_i64 && o == DType::I64), op, ": out must be f32",
               allow_i64 ? ", f64 or i64" : " or f64", ", got ", dtype_name(o));
}
}  // namespace

void sum(const Tensor& x, const Tensor& out) {
  check_scalar_reduction("sum", x, out, false);
  STRATA_DEVICE_DISPATCH(x.device(), sum(x, out));
}

void max(const Tensor& x, const Tensor& out) {
  check_scalar_reduction("max", x, out, false);
  STRATA_DEVICE_DISPATCH(x.device(), max(x, out));
}

void sum_of_squares(const Tensor& x, const Tensor& out) {
  check_scalar_reduction("sum_of_squares", x, out, false);
  STRATA_DEVICE_DISPATCH(x.device(), sum_of_squares(x, out));
}

void count_zeros(const Tensor& x, const Tensor& out) {
  check_scalar_reduction("count_zeros", x, out, true);
  STRATA_DEVICE_DISPATCH(x.device(), count_zeros(x, out));
}

void sum_rows(const Tensor& x, const Tensor& out) {
  const char* op = "sum_rows";
  check_args(op, {{"x", &x}, {"out", &out}});
  check_float(x, op, "x");
  check_float(out, op, "out");
  STRATA_CHECK(x.dim() >= 1, op, ": x must have at least one dimension, got a scalar");
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  STRATA_CHECK(out.numel() == rows, op, ": out ", out.shape().str(), " must have ", rows,
               " elements (one per row of x ", x.shape().str(), ")");
  STRATA_DEVICE_DISPATCH(x.device(), sum_rows(x, out));
}

}  // namespace strata::kernels
