// Sweep cases for kernels/elementwise.h: add, mul (+ backward), scale, add_bias (+ bias_grad, its
// backward), axpy — each on the target (device, dtype) against the f64 CPU reference computed on
// the same rounded inputs. Mixed precision as used in training: bias_grad of a dtype gradient into
// an f32 dbias with accumulation, axpy of a dtype gradient into an f32 main_grad.
#include "kernels/elementwise.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

void elementwise_case(sweep::Context& c, const Shape& s) {
  const int64_t cols = s[s.ndim() - 1];
  // One rounding of each result: bound ≈ unit roundoff of the dtype (bf16 2^-8, f16 2^-11).
  const double tol = c.bound(1e-6, 4e-3, 5e-4);
  const double tol_f32 = 1e-6;  // results stored in f32 (accumulated in f32 or f64)
  // Column sums accumulate in f32 over up to 1e5 rows of cancelling terms: twice the room.
  const double tol_sum = c.bound(2e-6, 4e-3, 5e-4), tol_sum_f32 = 2e-6;
  const DType f64 = DType::F64;
  Tensor a = c.input(s, 1, -2, 2), b = c.input(s, 2, -2, 2), g = c.input(s, 3), bias = c.input({cols}, 4);
  Tensor ta = c.on_target(a), tb = c.on_target(b), tg = c.on_target(g);

  Tensor ref = Tensor::empty(s, f64), got = c.empty(s);
  add(a, b, ref);
  add(ta, tb, got);
  c.compare("add", s, got, ref, tol);
  mul(a, b, ref);
  mul(ta, tb, got);
  c.compare("mul.fwd", s, got, ref, tol);
  scale(a, -0.37, ref);
  scale(ta, -0.37, got);
  c.compare("scale", s, got, ref, tol);
  add_bias(a, bias, ref);
  add_bias(ta, c.on_target(bias), got);
  c.compare("add_bias.fwd", s, got, ref, tol);

  Tensor da = Tensor::empty(s, f64), db = Tensor::empty(s, f64), tda = c.empty(s), tdb = c.empty(s);
  mul_backward(a, b, g, da, db);
  mul_backward(ta, tb, tg, tda, tdb);
  c.compare("mul.bwd.da", s, tda, da, tol);
  c.compare("mul.bwd.db", s, tdb, db, tol);

  // bias_grad (backward of add_bias): into the dtype itself, and accumulated into f32.
  Tensor dbias = Tensor::empty({cols}, f64), tdbias = c.empty({cols});
  bias_grad(g, dbias, false);
  bias_grad(tg, tdbias, false);
  c.compare("add_bias.bwd.dbias", s, tdbias, dbias, tol_sum);
  Tensor dbias0 = c.input({cols}, 5).to(DType::F32).to(f64);
  Tensor dbias_acc = dbias0.clone(), tdbias_acc = dbias0.to(DType::F32).to(c.device);
  bias_grad(g, dbias_acc, true);
  bias_grad(tg, tdbias_acc, true);
  c.compare("add_bias.bwd.dbias_f32_accumulate", s, tdbias_acc, dbias_acc, tol_sum_f32);

  // axpy: into the dtype itself and into an f32 main_grad.
  Tensor y0 = c.input(s, 6);
  Tensor y = y0.clone(), ty = c.on_target(y0);
  axpy(0.37, g, y);
  axpy(0.37, tg, ty);
  c.compare("axpy", s, ty, y, tol);
  Tensor y32 = y0.to(DType::F32).to(f64), ty32 = y0.to(DType::F32).to(c.device);
  axpy(-1.5, g, y32);
  axpy(-1.5, tg, ty32);
  c.compare("axpy.main_grad_f32", s, ty32, y32, tol_f32);
}
}  // namespace

STRATA_SWEEP_OP("elementwise", kFloat, "add mul mul_backward scale axpy add_bias bias_grad", [](sweep::Context& c) {
  std::vector<Shape> shapes = {Shape{1, 5}, Shape{37, 130}, Shape{3, 4099}, Shape{2, 3, 7}};
  if (!c.quick) {
    shapes.push_back(Shape{2048, 4096});      // activations of a 2k-token micro-batch, h = 4096
    shapes.push_back(Shape{1, (1 << 20) + 3});  // a single long row
    shapes.push_back(Shape{100003, 3});       // many short rows (bias_grad over long columns)
  }
  for (const Shape& s : shapes) elementwise_case(c, s);
});
