// Argument checks and device dispatch for kernels/norm.h (LayerNorm, RMSNorm).
#include "kernels/norm.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
DType stats_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

// x: [..., h] with h >= 1; returns n (number of rows).
int64_t check_rows(const char* op, const Tensor& x) {
  check_float(x, op, "x");
  STRATA_CHECK(x.dim() >= 1 && x.size(-1) >= 1, op, ": x ", x.shape().str(),
               " must have a non-empty last dimension");
  return x.numel() / x.size(-1);
}
void check_like_x(const char* op, const Tensor& x, const Tensor& t, const char* name) {
  STRATA_CHECK(t.dtype() == x.dtype(), op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", expected ",
               dtype_name(x.dtype()), " (the dtype of x)");
  STRATA_CHECK(t.shape() == x.shape(), op, ": ", name, " has shape ", t.shape().str(), ", expected ",
               x.shape().str(), " (the shape of x)");
}
void check_param(const char* op, const Tensor& x, const Tensor& p, const char* name) {
  STRATA_CHECK(p.dtype() == x.dtype(), op, ": ", name, " has dtype ", dtype_name(p.dtype()), ", expected ",
               dtype_name(x.dtype()), " (the dtype of x)");
  STRATA_CHECK(p.dim() == 1 && p.size(0) == x.size(-1), op, ": ", name, " has shape ", p.shape().str(),
               ", expected [", x.size(-1), "] (the last dimension of x ", x.shape().str(), ")");
}
void check_param_grad(const char* op, const Tensor& x, const Tensor& g, const char* name) {
  STRATA_CHECK(g.dtype() == x.dtype() || g.dtype() == DType::F32, op, ": ", name, " has dtype ",
               dtype_name(g.dtype()), ", expected ", dtype_name(x.dtype()), " or f32");
  STRATA_CHECK(g.dim() == 1 && g.size(0) == x.size(-1), op, ": ", name, " has shape ", g.shape().str(),
               ", expected [", x.size(-1), "] (the last dimension of x ", x.shape().str(), ")");
}
void check_stats(const char* op, const Tensor& x, int64_t n, const Tensor& s, const char* name) {
  DType want = stats_dtype(x.dtype());
  STRATA_CHECK(s.dtype() == want, op, ": ", name, " has dtype ", dtype_name(s.dtype()), ", expected ",
               dtype_name(want), " for x of dtype ", dtype_name(x.dtype()));
  STRATA_CHECK(s.numel() == n, op, ": ", name, " has shape ", s.shape().str(), " (", s.numel(),
               " elements), expected one per row of x ", x.shape().str(), " (", n, ")");
}
void check_eps(const char* op, const NormOptions& opt) {
  STRATA_CHECK(std::isfinite(opt.eps) && opt.eps >= 0, op, ": eps must be finite and >= 0, got ", opt.eps);
}
}  // namespace

int64_t norm_rows_per_chunk(int64_t n) {
  constexpr int64_t kMinRows = 32, kMaxChunks = 256;
  int64_t rows = (n + kMaxChunks - 1) / kMaxChunks;
  return rows < kMinRows ? kMinRows : rows;
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, const NormOptions& opt) {
  const char* op = "layernorm_forward";
  check_args(op, {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}, {"y", &y}, {"mean", &mean}, {"rstd", &rstd}});
  int64_t n = check_rows(op, x);
  check_param(op, x, gamma, "gamma");
  check_param(op, x, beta, "beta");
  check_like_x(op, x, y, "y");
  check_stats(op, x, n, mean, "mean");
  check_stats(op, x, n, rstd, "rstd");
  check_eps(op, opt);
  STRATA_DEVICE_DISPATCH(x.device(), layernorm_forward(x, gamma, beta, y, mean, rstd, opt));
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const NormOptions& opt, bool accumulate) {
  const char* op = "layernorm_backward";
  check_args(op, {{"dy", &dy}, {"x", &x}, {"gamma", &gamma}, {"mean", &mean}, {"rstd", &rstd}, {"dx", &dx},
                  {"dgamma", &dgamma}, {"dbeta", &dbeta}});
  int64_t n = check_rows(op, x);
  check_like_x(op, x, dy, "dy");
  check_like_x(op, x, dx, "dx");
  check_param(op, x, gamma, "gamma");
  check_stats(op, x, n, mean, "mean");
  check_stats(op, x, n, rstd, "rstd");
  check_param_grad(op, x, dgamma, "dgamma");
  check_param_grad(op, x, dbeta, "dbeta");
  STRATA_CHECK(dgamma.dtype() == dbeta.dtype(), op, ": dgamma (", dtype_name(dgamma.dtype()), ") and dbeta (",
               dtype_name(dbeta.dtype()), ") must have the same dtype");
  STRATA_DEVICE_DISPATCH(x.device(), layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, opt, accumulate));
}

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd,
                     const NormOptions& opt) {
  const char* op = "rmsnorm_forward";
  check_args(op, {{"x", &x}, {"gamma", &gamma}, {"y", &y}, {"rstd", &rstd}});
  int64_t n = check_rows(op, x);
  check_param(op, x, gamma, "gamma");
  check_like_x(op, x, y, "y");
  check_stats(op, x, n, rstd, "rstd");
  check_eps(op, opt);
  STRATA_DEVICE_DISPATCH(x.device(), rmsnorm_forward(x, gamma, y, rstd, opt));
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dgamma, const NormOptions& opt, bool accumulate) {
  const char* op = "rmsnorm_backward";
  check_args(op, {{"dy", &dy}, {"x", &x}, {"gamma", &gamma}, {"rstd", &rstd}, {"dx", &dx}, {"dgamma", &dgamma}});
  int64_t n = check_rows(op, x);
  check_like_x(op, x, dy, "dy");
  check_like_x(op, x, dx, "dx");
  check_param(op, x, gamma, "gamma");
  check_stats(op, x, n, rstd, "rstd");
  check_param_grad(op, x, dgamma, "dgamma");
  STRATA_DEVICE_DISPATCH(x.device(), rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma, opt, accumulate));
}

}  // namespace strata::kernels
