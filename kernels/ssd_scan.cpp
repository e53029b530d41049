// Argument checks and device dispatch for kernels/ssd_scan.h.
#include "kernels/ssd_scan.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
void check_shape(const char* op, const char* name, const Tensor& t, const Shape& want) {
  STRATA_CHECK(t.shape() == want, op, ": ", name, " is ", t.shape().str(), ", expected ", want.str());
  STRATA_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
}
void check_inputs(const char* op, const SsdScanInputs& in) {
  check_args(op, {{"x", &in.x}, {"dt", &in.dt}, {"A", &in.A}, {"B", &in.B}, {"C", &in.C}, {"D", &in.D}});
  check_float(in.x, op, "x");
  STRATA_CHECK(in.x.dim() == 4 && in.B.dim() == 4, op, ": x [b, l, H, P] and B [b, l, G, N] must be 4-d");
  const int64_t b = in.x.size(0), l = in.x.size(1), H = in.x.size(2), P = in.x.size(3);
  const int64_t G = in.B.size(2), N = in.B.size(3);
  STRATA_CHECK(G > 0 && H % G == 0, op, ": heads ", H, " are not divisible by the groups ", G);
  STRATA_CHECK(in.chunk_size > 0, op, ": chunk_size must be positive, got ", in.chunk_size);
  check_shape(op, "x", in.x, {b, l, H, P});
  check_shape(op, "dt", in.dt, {b, l, H});
  check_shape(op, "A", in.A, {H});
  check_shape(op, "B", in.B, {b, l, G, N});
  check_shape(op, "C", in.C, {b, l, G, N});
  check_shape(op, "D", in.D, {H});
  for (const Tensor* t : {&in.dt, &in.B, &in.C}) check_same_dtype(in.x, *t, op);
  check_float(in.A, op, "A");
  check_float(in.D, op, "D");
  if (in.initial_state.defined()) check_shape(op, "initial_state", in.initial_state, {b, H, P, N});
}
Shape state_shape(const SsdScanInputs& in) { return {in.x.size(0), in.x.size(2), in.x.size(3), in.B.size(3)}; }
}  // namespace

void ssd_scan_forward(const SsdScanInputs& in, const Tensor& y, const Tensor& final_state) {
  check_inputs("ssd_scan_forward", in);
  check_shape("ssd_scan_forward", "y", y, in.x.shape());
  check_same_dtype(in.x, y, "ssd_scan_forward");
  if (final_state.defined()) check_shape("ssd_scan_forward", "final_state", final_state, state_shape(in));
  STRATA_DEVICE_DISPATCH(in.x.device(), ssd_scan_forward(in, y, final_state));
}

void ssd_scan_backward(const SsdScanInputs& in, const Tensor& dy, const Tensor& d_final_state,
                       const SsdScanGrads& g) {
  const char* op = "ssd_scan_backward";
  check_inputs(op, in);
  check_shape(op, "dy", dy, in.x.shape());
  if (d_final_state.defined()) check_shape(op, "d_final_state", d_final_state, state_shape(in));
  check_shape(op, "dx", g.dx, in.x.shape());
  check_shape(op, "ddt", g.ddt, in.dt.shape());
  check_shape(op, "dA", g.dA, in.A.shape());
  check_shape(op, "dB", g.dB, in.B.shape());
  check_shape(op, "dC", g.dC, in.C.shape());
  check_shape(op, "dD", g.dD, in.D.shape());
  if (g.d_initial_state.defined()) check_shape(op, "d_initial_state", g.d_initial_state, state_shape(in));
  STRATA_DEVICE_DISPATCH(in.x.device(), ssd_scan_backward(in, dy, d_final_state, g));
}

}  // namespace strata::kernels
