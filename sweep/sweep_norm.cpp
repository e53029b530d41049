// Sweep cases for kernels/norm.h: LayerNorm and RMSNorm forward (y, mean, rstd) and backward
// (dx, dgamma, dbeta in the parameter dtype and in f32, fresh and accumulated) against the f64 CPU
// reference on the same dtype-rounded inputs.
#include "kernels/norm.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};
DType stats_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

void norm_case(sweep::Context& c, bool layernorm, const Shape& s, bool zero_centered, bool accumulate) {
  const int64_t h = s[s.ndim() - 1], n = s.numel() / h;
  const std::string name = std::string(layernorm ? "layernorm" : "rmsnorm") + (zero_centered ? "_1p" : "") +
                           (accumulate ? "_acc" : "");
  NormOptions opt;
  opt.zero_centered_gamma = zero_centered;
  if (h == 1) opt.eps = 0.5;  // h = 1 RMSNorm: dx ∝ 1 - xhat² = eps·rstd², which cancels unless eps ~ x²
  Tensor x = c.input(s, 1, -1, 3), dy = c.input(s, 2);
  Tensor gamma = c.input({h}, 3, zero_centered ? -0.5 : 0.5, zero_centered ? 0.5 : 1.5);
  Tensor beta = c.input({h}, 4, -0.5, 0.5);
  Tensor prev = c.input({h}, 5), prev_b = c.input({h}, 6);  // existing gradients when accumulating
  // f64 reference.
  Tensor y_ref = Tensor::empty(s, DType::F64), mean_ref = Tensor::empty({n}, DType::F64);
  Tensor rstd_ref = Tensor::empty({n}, DType::F64), dx_ref = Tensor::empty(s, DType::F64);
  Tensor dg_ref = prev.clone(), db_ref = prev_b.clone();
  // Target.
  const DType sd = stats_dtype(c.dtype);
  Tensor y = c.empty(s), dx = c.empty(s);
  Tensor mean = Tensor::empty({n}, sd, c.device), rstd = Tensor::empty({n}, sd, c.device);
  Tensor xt = c.on_target(x), dyt = c.on_target(dy), gt = c.on_target(gamma), bt = c.on_target(beta);
  if (layernorm) {
    layernorm_forward(x, gamma, beta, y_ref, mean_ref, rstd_ref, opt);
    layernorm_backward(dy, x, gamma, mean_ref, rstd_ref, dx_ref, dg_ref, db_ref, opt, accumulate);
    layernorm_forward(xt, gt, bt, y, mean, rstd, opt);
  } else {
    rmsnorm_forward(x, gamma, y_ref, rstd_ref, opt);
    rmsnorm_backward(dy, x, gamma, rstd_ref, dx_ref, dg_ref, opt, accumulate);
    rmsnorm_forward(xt, gt, y, rstd, opt);
  }
  const double tol = c.bound(1e-5, 1e-2, 2e-3);
  c.compare(name + ".y", s, y, y_ref, tol);
  c.compare(name + ".rstd", s, rstd, rstd_ref, 1e-5);
  if (layernorm) c.compare(name + ".mean", s, mean, mean_ref, 1e-5);
  // Parameter gradients in the parameter dtype and in f32 (Megatron main_grad).
  std::vector<DType> grad_dtypes = {c.dtype};
  if (c.dtype != DType::F32) grad_dtypes.push_back(DType::F32);
  for (DType gd : grad_dtypes) {
    const std::string g = gd == c.dtype ? "" : "[grad f32]";
    Tensor dg = prev.to(gd).to(c.device), db = prev_b.to(gd).to(c.device);
    if (layernorm) layernorm_backward(dyt, xt, gt, mean, rstd, dx, dg, db, opt, accumulate);
    else rmsnorm_backward(dyt, xt, gt, rstd, dx, dg, opt, accumulate);
    // f32 parameter gradients carry only f32 accumulation error, whatever the input dtype.
    const double gtol = gd == DType::F32 ? 1e-5 : tol;
    c.compare(name + ".dx" + g, s, dx, dx_ref, tol);
    c.compare(name + ".dgamma" + g, s, dg, dg_ref, gtol);
    if (layernorm) c.compare(name + ".dbeta" + g, s, db, db_ref, gtol);
  }
}
}  // namespace

STRATA_SWEEP_OP("norm", kFloat,
                "layernorm_forward layernorm_backward rmsnorm_forward rmsnorm_backward", [](sweep::Context& c) {
  std::vector<Shape> shapes = {Shape{1, 3}, Shape{37, 257}, Shape{3, 5000}, Shape{2, 3, 40}};
  if (!c.quick) {
    shapes.push_back(Shape{4096, 4096});  // Megatron hidden 4096
    shapes.push_back(Shape{1030, 1000});  // one warp per row, many rows
    shapes.push_back(Shape{64, 12288});   // 1024 threads per row
  }
  for (const Shape& s : shapes) {
    norm_case(c, true, s, false, false);
    norm_case(c, false, s, false, false);
  }
  norm_case(c, true, Shape{33, 96}, true, true);
  norm_case(c, false, Shape{33, 96}, true, true);
  norm_case(c, false, Shape{9, 1}, false, false);  // h = 1 (LayerNorm's gradients are all 0 there)
  if (!c.quick) {
    norm_case(c, true, Shape{8192, 1024}, true, true);
    norm_case(c, false, Shape{8192, 1024}, true, true);
  }
});
