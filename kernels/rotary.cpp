// Argument checks and device dispatch for kernels/rotary.h.
#include "kernels/rotary.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace strata::kernels {

int64_t rotary_dim(int64_t d, double rotary_percent) {
  return static_cast<int64_t>(static_cast<double>(d) * rotary_percent);
}

namespace {
void check_rotary(const char* op, const Tensor& in, const char* in_name, const Tensor& out, const char* out_name,
                  const RotaryOptions& opt) {
  if (opt.positions) check_args(op, {{in_name, &in}, {out_name, &out}, {"positions", opt.positions}});
  else check_args(op, {{in_name, &in}, {out_name, &out}});
  check_float(in, op, in_name);
  check_same_dtype(in, out, op);
  STRATA_CHECK(in.dim() == 4, op, ": ", in_name, " must be [s, b, heads, d], got ", in.shape().str());
  STRATA_CHECK(out.shape() == in.shape(), op, ": ", out_name, " has shape ", out.shape().str(), ", expected ",
               in.shape().str(), " (the shape of ", in_name, ")");
  STRATA_CHECK(opt.rotary_percent > 0 && opt.rotary_percent <= 1, op, ": rotary_percent must be in (0, 1], got ",
               opt.rotary_percent);
  STRATA_CHECK(std::isfinite(opt.base) && opt.base > 0, op, ": rotary base must be finite and > 0, got ", opt.base);
  const int64_t d = in.size(3), rot = rotary_dim(d, opt.rotary_percent);
  STRATA_CHECK(rot >= 2 && rot % 2 == 0, op, ": rot_dim = int(d ", d, " * rotary_percent ", opt.rotary_percent,
               ") = ", rot, " must be even and >= 2");
  if (opt.positions) {
    const Tensor& p = *opt.positions;
    STRATA_CHECK(p.dtype() == DType::I64, op, ": positions must be i64, got ", dtype_name(p.dtype()));
    const bool per_sequence = p.dim() == 1 && p.size(0) == in.size(0);
    const bool per_token = p.dim() == 2 && p.size(0) == in.size(0) && p.size(1) == in.size(1);
    STRATA_CHECK(per_sequence || per_token, op, ": positions has shape ", p.shape().str(), ", expected [",
                 in.size(0), "] or [", in.size(0), ", ", in.size(1), "] (per sequence index, or per token, of ",
                 in_name, " ", in.shape().str(), ")");
  }
}
}  // namespace

void rotary_forward(const Tensor& x, const Tensor& y, const RotaryOptions& opt) {
  check_rotary("rotary_forward", x, "x", y, "y", opt);
  STRATA_DEVICE_DISPATCH(x.device(), rotary_forward(x, y, opt));
}

void rotary_backward(const Tensor& dy, const Tensor& dx, const RotaryOptions& opt) {
  check_rotary("rotary_backward", dy, "dy", dx, "dx", opt);
  STRATA_DEVICE_DISPATCH(dy.device(), rotary_backward(dy, dx, opt));
}

}  // namespace strata::kernels
