// Sweep cases for kernels/ssd_scan.h and kernels/causal_conv1d.h: the target's scan (forward with
// initial and final state, backward with every gradient) and conv1d + SiLU against the f64 CPU
// reference from the same dtype-rounded inputs; chunk sizes that do and do not divide l.
#include "kernels/causal_conv1d.h"
#include "kernels/ssd_scan.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kScanTypes = {DType::F64, DType::F32, DType::BF16};

struct ScanShape {
  int64_t b, l, H, P, G, N, Q;
};

SsdScanInputs scan_inputs(sweep::Context& c, const ScanShape& s) {
  SsdScanInputs in;
  in.x = c.input({s.b, s.l, s.H, s.P}, 1);
  in.dt = c.input({s.b, s.l, s.H}, 2, 0.01, 0.3);
  in.A = c.input({s.H}, 3, -4.0, -0.5);
  in.B = c.input({s.b, s.l, s.G, s.N}, 4);
  in.C = c.input({s.b, s.l, s.G, s.N}, 5);
  in.D = c.input({s.H}, 6);
  in.initial_state = c.input({s.b, s.H, s.P, s.N}, 7, -0.5, 0.5);
  in.chunk_size = s.Q;
  return in;
}
SsdScanInputs on_target(sweep::Context& c, const SsdScanInputs& r) {
  SsdScanInputs t = r;
  for (Tensor* x : {&t.x, &t.dt, &t.B, &t.C}) *x = c.on_target(*x);
  // A, D and the states stay f32 (as the mixer keeps them) on the target device.
  for (Tensor* x : {&t.A, &t.D, &t.initial_state}) *x = x->to(DType::F32).to(c.device);
  if (c.dtype == DType::F64)
    for (Tensor* x : {&t.A, &t.D, &t.initial_state}) *x = x->to(DType::F64);
  return t;
}
SsdScanGrads grads_like(const SsdScanInputs& in) {
  auto e = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); };
  return {e(in.x), e(in.dt), e(in.A), e(in.B), e(in.C), e(in.D), e(in.initial_state)};
}

void scan_case(sweep::Context& c, const ScanShape& s) {
  const Shape shape{s.b, s.l, s.H, s.P};
  const Shape state{s.b, s.H, s.P, s.N};
  const SsdScanInputs ref = scan_inputs(c, s), tgt = on_target(c, ref);
  const Tensor dy = c.input(shape, 8), dstate = c.input(state, 9);
  Tensor y_ref = Tensor::empty(shape, DType::F64), s_ref = Tensor::empty(state, DType::F64);
  ssd_scan_forward(ref, y_ref, s_ref);
  SsdScanGrads g_ref = grads_like(ref);
  ssd_scan_backward(ref, dy, dstate, g_ref);
  Tensor y = c.empty(shape), st = Tensor::empty(state, tgt.A.dtype(), c.device);
  ssd_scan_forward(tgt, y, st);
  SsdScanGrads g = grads_like(tgt);
  ssd_scan_backward(tgt, c.on_target(dy), dstate.to(tgt.A.dtype()).to(c.device), g);
  const double tol = c.bound(1e-5, 3e-2, 3e-2);
  c.compare("fwd.y", shape, y, y_ref, tol);
  c.compare("fwd.final_state", shape, st, s_ref, tol);
  c.compare("bwd.dx", shape, g.dx, g_ref.dx, tol);
  c.compare("bwd.ddt", shape, g.ddt, g_ref.ddt, tol);
  c.compare("bwd.dA", shape, g.dA, g_ref.dA, tol);
  c.compare("bwd.dB", shape, g.dB, g_ref.dB, tol);
  c.compare("bwd.dC", shape, g.dC, g_ref.dC, tol);
  c.compare("bwd.dD", shape, g.dD, g_ref.dD, tol);
  c.compare("bwd.d_initial_state", shape, g.d_initial_state, g_ref.d_initial_state, tol);
}

void conv_case(sweep::Context& c, const Shape& s, int64_t K) {
  const int64_t b = s[0], C = s[2];
  const Tensor x = c.input(s, 11), w = c.input({C, K}, 12), bias = c.input({C}, 13), dy = c.input(s, 14);
  const Tensor hist = c.input({b, C, K - 1}, 15);
  Tensor y_ref = Tensor::empty(s, DType::F64), h_ref = Tensor::empty({b, C, K - 1}, DType::F64);
  causal_conv1d_silu_forward(x, w, bias, hist, y_ref, h_ref);
  Tensor dx_ref = Tensor::empty(s, DType::F64), dw_ref = Tensor::zeros({C, K}, DType::F64);
  Tensor db_ref = Tensor::zeros({C}, DType::F64);
  causal_conv1d_silu_backward(x, w, bias, dy, dx_ref, dw_ref, db_ref);
  Tensor y = c.empty(s), h = c.empty({b, C, K - 1});
  causal_conv1d_silu_forward(c.on_target(x), c.on_target(w), c.on_target(bias), c.on_target(hist), y, h);
  const DType gd = c.dtype == DType::F64 ? DType::F64 : DType::F32;
  Tensor dx = c.empty(s), dw = Tensor::zeros({C, K}, gd, c.device), db = Tensor::zeros({C}, gd, c.device);
  causal_conv1d_silu_backward(c.on_target(x), c.on_target(w), c.on_target(bias), c.on_target(dy), dx, dw, db);
  const double tol = c.bound(1e-6, 1e-2, 1e-2);
  c.compare("fwd.y", s, y, y_ref, tol);
  c.compare("fwd.final_history", s, h, h_ref, tol);
  c.compare("bwd.dx", s, dx, dx_ref, tol);
  c.compare("bwd.dw", s, dw, dw_ref, tol);
  c.compare("bwd.dbias", s, db, db_ref, tol);
}
}  // namespace

STRATA_SWEEP_OP("ssd_scan", kScanTypes, "ssd_scan_forward ssd_scan_backward", [](sweep::Context& c) {
  std::vector<ScanShape> shapes = {{1, 5, 2, 3, 1, 4, 2}, {2, 19, 4, 8, 2, 16, 8}};
  if (!c.quick) shapes.push_back({2, 300, 8, 64, 2, 64, 128});  // 128 does not divide 300
  for (const ScanShape& s : shapes) scan_case(c, s);
});

STRATA_SWEEP_OP("causal_conv1d", kScanTypes, "causal_conv1d_silu_forward causal_conv1d_silu_backward",
                [](sweep::Context& c) {
  std::vector<Shape> shapes = {Shape{1, 2, 3}, Shape{2, 37, 20}};
  if (!c.quick) shapes.push_back(Shape{2, 512, 384});
  for (const Shape& s : shapes) conv_case(c, s, 4);
});
