// Argument checks and device dispatch for kernels/dropout.h.
#include "kernels/dropout.h"

#include "core/copy.h"
#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
// Returns true when the op is the identity (p == 0) and has been done as a copy.
bool check_dropout(const char* op, const char* in_name, const char* out_name, const Tensor& in, const Tensor& out,
                   double p, const GlobalSlice& slice) {
  check_args(op, {{in_name, &in}, {out_name, &out}});
  check_float(in, op, in_name);
  check_same_dtype(in, out, op);
  STRATA_CHECK(in.shape() == out.shape(), op, ": ", out_name, " ", out.shape().str(), " must match ", in_name, " ",
               in.shape().str());
  STRATA_CHECK(p >= 0.0 && p < 1.0, op, ": dropout probability p must be in [0, 1), got ", p);
  GlobalIndexer::make(in, slice);  // checks that the slice fits in its global shape
  if (p == 0.0) {
    if (in.data_ptr() != out.data_ptr()) copy_strided(out, in);
    return true;
  }
  return false;
}
}  // namespace

void dropout_forward(const Tensor& x, const Tensor& y, double p, philox::Key key, const GlobalSlice& slice) {
  if (check_dropout("dropout_forward", "x", "y", x, y, p, slice)) return;
  STRATA_DEVICE_DISPATCH(x.device(), dropout_forward(x, y, p, key, slice));
}

void dropout_backward(const Tensor& dy, const Tensor& dx, double p, philox::Key key, const GlobalSlice& slice) {
  if (check_dropout("dropout_backward", "dy", "dx", dy, dx, p, slice)) return;
  STRATA_DEVICE_DISPATCH(dy.device(), dropout_backward(dy, dx, p, key, slice));
}

}  // namespace strata::kernels
