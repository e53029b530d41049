// Argument checks and device dispatch for kernels/mhc.h.
#include "kernels/mhc.h"

#include "kernels/mhc_checks.h"

#include "kernels/dispatch.h"

namespace strata::kernels {
namespace {
// The mappings' and parameters' dtype for activations x: f64 for f64, else f32.
DType acc_of(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }

void want(const char* op, const char* name, const Tensor& t, const Shape& shape, DType dtype) {
  STRATA_CHECK(t.defined(), op, ": ", name, " is undefined");
  STRATA_CHECK(t.shape() == shape && t.is_contiguous(), op, ": ", name, " is ", t.shape().str(), ", expected ",
               shape.str(), " (contiguous)");
  STRATA_CHECK(t.dtype() == dtype, op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", expected ",
               dtype_name(dtype));
}
// A gradient target (accumulated or written): the shape, any float dtype.
void want_grad(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  STRATA_CHECK(t.defined(), op, ": ", name, " is undefined");
  STRATA_CHECK(t.shape() == shape && t.is_contiguous(), op, ": ", name, " is ", t.shape().str(), ", expected ",
               shape.str(), " (contiguous)");
  check_float(t, op, name);
}
// x [T, n·C] act; returns C.
int64_t check_streams(const char* op, const Tensor& x, int64_t n) {
  STRATA_CHECK(x.defined(), op, ": x is undefined");
  check_float(x, op, "x");
  STRATA_CHECK(n >= 1, op, ": n = ", n, " streams, expected >= 1");
  STRATA_CHECK(x.dim() == 2 && x.is_contiguous() && x.size(1) % n == 0, op, ": x must be a contiguous [T, n*C] with n = ",
               n, ", got ", x.shape().str());
  return x.size(1) / n;
}
int64_t streams_of(const char* op, const Tensor& h) {
  STRATA_CHECK(h.defined() && h.dim() == 2, op, ": h_pre / h_post must be [T, n], got ",
               h.defined() ? h.shape().str() : std::string("undefined"));
  return h.size(1);
}
void check_mapping_params(const char* op, const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                          const MhcMappingOptions& o) {
  check_streams(op, x, o.n);
  const int64_t m = o.n * o.n + 2 * o.n, K = x.size(1);
  want(op, "w", w, Shape{m, K}, acc_of(x));
  want(op, "alpha", alpha, Shape{3}, acc_of(x));
  want(op, "bias", bias, Shape{m}, acc_of(x));
  STRATA_CHECK(o.norm_eps > 0, op, ": norm_eps must be > 0, got ", o.norm_eps);
}
}  // namespace

void mhc_checks::mhc_mappings_forward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                 const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                 const Tensor& h_res_logits, const Tensor& proj, const Tensor& rinv) {
  const char* op = "mhc_mappings_forward";
  check_mapping_params(op, x, w, alpha, bias, o);
  const int64_t T = x.size(0), n = o.n;
  const DType a = acc_of(x);
  want(op, "h_pre", h_pre, Shape{T, n}, a), want(op, "h_post", h_post, Shape{T, n}, a);
  want(op, "h_res_logits", h_res_logits, Shape{T, n, n}, a);
  want(op, "proj", proj, Shape{T, n * n + 2 * n}, a), want(op, "rinv", rinv, Shape{T}, a);
}

void mhc_mappings_forward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                          const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                          const Tensor& h_res_logits, const Tensor& proj, const Tensor& rinv) {
  mhc_checks::mhc_mappings_forward(x, w, alpha, bias, o, h_pre, h_post, h_res_logits, proj, rinv);
  STRATA_DEVICE_DISPATCH(x.device(), mhc_mappings_forward(x, w, alpha, bias, o, h_pre, h_post, h_res_logits, proj, rinv));
}

void mhc_checks::mhc_mappings_backward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                  const Tensor& proj, const Tensor& rinv, const MhcMappingOptions& o, const Tensor& g_pre,
                  const Tensor& g_post, const Tensor& g_res_logits, const Tensor& g_x, const Tensor& g_w,
                  const Tensor& g_alpha, const Tensor& g_bias) {
  const char* op = "mhc_mappings_backward";
  check_mapping_params(op, x, w, alpha, bias, o);
  const int64_t T = x.size(0), n = o.n, m = n * n + 2 * n;
  const DType a = acc_of(x);
  want(op, "proj", proj, Shape{T, m}, a), want(op, "rinv", rinv, Shape{T}, a);
  want(op, "g_pre", g_pre, Shape{T, n}, a), want(op, "g_post", g_post, Shape{T, n}, a);
  want(op, "g_res_logits", g_res_logits, Shape{T, n, n}, a);
  want_grad(op, "g_x", g_x, x.shape()), want_grad(op, "g_w", g_w, w.shape());
  want_grad(op, "g_alpha", g_alpha, Shape{3}), want_grad(op, "g_bias", g_bias, Shape{m});
}

void mhc_mappings_backward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                           const Tensor& proj, const Tensor& rinv, const MhcMappingOptions& o, const Tensor& g_pre,
                           const Tensor& g_post, const Tensor& g_res_logits, const Tensor& g_x, const Tensor& g_w,
                           const Tensor& g_alpha, const Tensor& g_bias) {
  mhc_checks::mhc_mappings_backward(x, w, alpha, bias, proj, rinv, o, g_pre, g_post, g_res_logits, g_x, g_w, g_alpha,
                                    g_bias);
  STRATA_DEVICE_DISPATCH(x.device(), mhc_mappings_backward(x, w, alpha, bias, proj, rinv, o, g_pre, g_post,
                                                           g_res_logits, g_x, g_w, g_alpha, g_bias));
}

namespace {
// proj [T, m], sumsq [T], alpha [3], bias [m] of one float dtype (f32 or f64); returns T.
int64_t check_compute_h(const char* op, const Tensor& proj, const Tensor& sumsq, const Tensor& alpha,
                        const Tensor& bias, int64_t K, const MhcMappingOptions& o) {
  const int64_t n = o.n, m = n * n + 2 * n;
  STRATA_CHECK(proj.defined() && proj.dim() == 2 && proj.size(1) == m, op, ": proj must be [T, ", m, "], got ",
               proj.defined() ? proj.shape().str() : std::string("undefined"));
  STRATA_CHECK(K >= 1 && o.norm_eps > 0, op, ": K = ", K, " and norm_eps = ", o.norm_eps, " must be positive");
  const int64_t T = proj.size(0);
  const DType a = proj.dtype();
  STRATA_CHECK(a == DType::F32 || a == DType::F64, op, ": proj must be f32 or f64, got ", dtype_name(a));
  want(op, "proj", proj, Shape{T, m}, a), want(op, "sumsq", sumsq, Shape{T}, a);
  want(op, "alpha", alpha, Shape{3}, a), want(op, "bias", bias, Shape{m}, a);
  return T;
}
}  // namespace

void mhc_compute_h_forward(const Tensor& proj, const Tensor& sumsq, const Tensor& alpha, const Tensor& bias,
                           int64_t K, const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                           const Tensor& h_res_logits, const Tensor& rinv) {
  const char* op = "mhc_compute_h_forward";
  const int64_t n = o.n, T = check_compute_h(op, proj, sumsq, alpha, bias, K, o);
  const DType a = proj.dtype();
  want(op, "h_pre", h_pre, Shape{T, n}, a), want(op, "h_post", h_post, Shape{T, n}, a);
  want(op, "h_res_logits", h_res_logits, Shape{T, n, n}, a), want(op, "rinv", rinv, Shape{T}, a);
  STRATA_DEVICE_DISPATCH(proj.device(),
                         mhc_compute_h_forward(proj, sumsq, alpha, bias, K, o, h_pre, h_post, h_res_logits, rinv));
}

void mhc_compute_h_backward(const Tensor& proj, const Tensor& sumsq, const Tensor& alpha, const Tensor& bias,
                            int64_t K, const MhcMappingOptions& o, const Tensor& g_pre, const Tensor& g_post,
                            const Tensor& g_res_logits, const Tensor& g_proj, const Tensor& g_sumsq,
                            const Tensor& g_alpha, const Tensor& g_bias) {
  const char* op = "mhc_compute_h_backward";
  const int64_t n = o.n, m = n * n + 2 * n, T = check_compute_h(op, proj, sumsq, alpha, bias, K, o);
  const DType a = proj.dtype();
  want(op, "g_pre", g_pre, Shape{T, n}, a), want(op, "g_post", g_post, Shape{T, n}, a);
  want(op, "g_res_logits", g_res_logits, Shape{T, n, n}, a);
  want(op, "g_proj", g_proj, Shape{T, m}, a), want(op, "g_sumsq", g_sumsq, Shape{T}, a);
  want_grad(op, "g_alpha", g_alpha, Shape{3}), want_grad(op, "g_bias", g_bias, Shape{m});
  STRATA_DEVICE_DISPATCH(proj.device(), mhc_compute_h_backward(proj, sumsq, alpha, bias, K, o, g_pre, g_post,
                                                               g_res_logits, g_proj, g_sumsq, g_alpha, g_bias));
}

namespace {
void check_sinkhorn(const char* op, const Tensor& logits, int64_t iterations, double eps) {
  STRATA_CHECK(logits.defined() && logits.dim() == 3 && logits.size(1) == logits.size(2) && logits.is_contiguous(),
               op, ": logits must be a contiguous [T, n, n], got ",
               logits.defined() ? logits.shape().str() : std::string("undefined"));
  STRATA_CHECK(logits.dtype() == DType::F32 || logits.dtype() == DType::F64, op, ": logits must be f32 or f64, got ",
               dtype_name(logits.dtype()));
  STRATA_CHECK(iterations >= 1, op, ": iterations = ", iterations, ", expected >= 1");
  STRATA_CHECK(eps >= 0, op, ": eps = ", eps, ", expected >= 0");
}
}  // namespace

void mhc_sinkhorn_forward(const Tensor& logits, int64_t iterations, double eps, const Tensor& out) {
  const char* op = "mhc_sinkhorn_forward";
  check_sinkhorn(op, logits, iterations, eps);
  want(op, "out", out, logits.shape(), logits.dtype());
  STRATA_DEVICE_DISPATCH(logits.device(), mhc_sinkhorn_forward(logits, iterations, eps, out));
}

void mhc_sinkhorn_backward(const Tensor& logits, int64_t iterations, double eps, const Tensor& g_out,
                           const Tensor& g_logits) {
  const char* op = "mhc_sinkhorn_backward";
  check_sinkhorn(op, logits, iterations, eps);
  want(op, "g_out", g_out, logits.shape(), logits.dtype());
  want(op, "g_logits", g_logits, logits.shape(), logits.dtype());
  STRATA_DEVICE_DISPATCH(logits.device(), mhc_sinkhorn_backward(logits, iterations, eps, g_out, g_logits));
}

void mhc_checks::mhc_aggregate_forward(const Tensor& x, const Tensor& h_pre, bool /*keep_fp32*/, const Tensor& out) {
  const char* op = "mhc_aggregate_forward";
  const int64_t n = streams_of(op, h_pre), C = check_streams(op, x, n), T = x.size(0);
  want(op, "h_pre", h_pre, Shape{T, n}, acc_of(x));
  want(op, "out", out, Shape{T, C}, x.dtype());
}

void mhc_aggregate_forward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& out) {
  mhc_checks::mhc_aggregate_forward(x, h_pre, keep_fp32, out);
  STRATA_DEVICE_DISPATCH(x.device(), mhc_aggregate_forward(x, h_pre, keep_fp32, out));
}

void mhc_checks::mhc_aggregate_backward(const Tensor& x, const Tensor& h_pre, bool /*keep_fp32*/, const Tensor& g_out,
                   const Tensor& g_x, const Tensor& g_h_pre) {
  const char* op = "mhc_aggregate_backward";
  const int64_t n = streams_of(op, h_pre), C = check_streams(op, x, n), T = x.size(0);
  want(op, "h_pre", h_pre, Shape{T, n}, acc_of(x));
  want(op, "g_out", g_out, Shape{T, C}, x.dtype());
  want_grad(op, "g_x", g_x, x.shape());
  want(op, "g_h_pre", g_h_pre, Shape{T, n}, acc_of(x));
}

void mhc_aggregate_backward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& g_out,
                            const Tensor& g_x, const Tensor& g_h_pre) {
  mhc_checks::mhc_aggregate_backward(x, h_pre, keep_fp32, g_out, g_x, g_h_pre);
  STRATA_DEVICE_DISPATCH(x.device(), mhc_aggregate_backward(x, h_pre, keep_fp32, g_out, g_x, g_h_pre));
}

namespace {
int64_t check_merge(const char* op, const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                    const Tensor& bias, const Tensor& post_scale) {
  const int64_t n = streams_of(op, h_post), C = check_streams(op, x, n), T = x.size(0);
  want(op, "h_post", h_post, Shape{T, n}, acc_of(x));
  want(op, "h_res", h_res, Shape{T, n, n}, acc_of(x));
  want(op, "y", y, Shape{T, C}, x.dtype());
  if (bias.defined()) want(op, "bias", bias, Shape{C}, x.dtype());
  if (post_scale.defined()) want(op, "post_scale", post_scale, x.shape(), acc_of(x));
  return C;
}
}  // namespace

void mhc_checks::mhc_merge_forward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                       const Tensor& bias, const Tensor& post_scale, bool /*keep_fp32*/, const Tensor& out) {
  const char* op = "mhc_merge_forward";
  check_merge(op, x, h_res, h_post, y, bias, post_scale);
  want(op, "out", out, x.shape(), x.dtype());
}

void mhc_merge_forward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                       const Tensor& bias, const Tensor& post_scale, bool keep_fp32, const Tensor& out) {
  mhc_checks::mhc_merge_forward(x, h_res, h_post, y, bias, post_scale, keep_fp32, out);
  STRATA_DEVICE_DISPATCH(x.device(), mhc_merge_forward(x, h_res, h_post, y, bias, post_scale, keep_fp32, out));
}

void mhc_checks::mhc_merge_backward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                        const Tensor& bias, const Tensor& post_scale, bool /*keep_fp32*/, const Tensor& g_out,
                        const Tensor& g_x, const Tensor& g_h_res, const Tensor& g_h_post, const Tensor& g_y,
                        const Tensor& g_bias) {
  const char* op = "mhc_merge_backward";
  const int64_t C = check_merge(op, x, h_res, h_post, y, bias, post_scale), T = x.size(0), n = h_post.size(1);
  want(op, "g_out", g_out, x.shape(), x.dtype());
  want_grad(op, "g_x", g_x, x.shape());
  want(op, "g_h_res", g_h_res, Shape{T, n, n}, acc_of(x)), want(op, "g_h_post", g_h_post, Shape{T, n}, acc_of(x));
  want_grad(op, "g_y", g_y, Shape{T, C});
  if (bias.defined()) want_grad(op, "g_bias", g_bias, Shape{C});
  else STRATA_CHECK(!g_bias.defined(), op, ": g_bias given without bias");
}

void mhc_merge_backward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                        const Tensor& bias, const Tensor& post_scale, bool keep_fp32, const Tensor& g_out,
                        const Tensor& g_x, const Tensor& g_h_res, const Tensor& g_h_post, const Tensor& g_y,
                        const Tensor& g_bias) {
  mhc_checks::mhc_merge_backward(x, h_res, h_post, y, bias, post_scale, keep_fp32, g_out, g_x, g_h_res, g_h_post, g_y,
                                 g_bias);
  STRATA_DEVICE_DISPATCH(x.device(), mhc_merge_backward(x, h_res, h_post, y, bias, post_scale, keep_fp32, g_out, g_x,
                                                        g_h_res, g_h_post, g_y, g_bias));
}

namespace {
int64_t check_contract(const char* op, const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
                       double eps) {
  STRATA_CHECK(fn.defined() && fn.dim() == 2, op, ": head_fn must be [n, n*C]");
  const int64_t n = fn.size(0), C = check_streams(op, x, n);
  want(op, "head_fn", fn, Shape{n, x.size(1)}, acc_of(x));
  want(op, "head_base", base, Shape{n}, acc_of(x));
  want(op, "head_scale", scale, Shape{1}, acc_of(x));
  STRATA_CHECK(eps > 0, op, ": eps must be > 0, got ", eps);
  return C;
}
}  // namespace

void mhc_contract_forward(const Tensor& x, const Tensor& head_fn, const Tensor& head_base, const Tensor& head_scale,
                          double eps, const Tensor& out) {
  const char* op = "mhc_contract_forward";
  const int64_t C = check_contract(op, x, head_fn, head_base, head_scale, eps);
  want(op, "out", out, Shape{x.size(0), C}, x.dtype());
  STRATA_DEVICE_DISPATCH(x.device(), mhc_contract_forward(x, head_fn, head_base, head_scale, eps, out));
}

void mhc_contract_backward(const Tensor& x, const Tensor& head_fn, const Tensor& head_base, const Tensor& head_scale,
                           double eps, const Tensor& g_out, const Tensor& g_x, const Tensor& g_fn,
                           const Tensor& g_base, const Tensor& g_scale) {
  const char* op = "mhc_contract_backward";
  const int64_t C = check_contract(op, x, head_fn, head_base, head_scale, eps);
  want(op, "g_out", g_out, Shape{x.size(0), C}, x.dtype());
  want_grad(op, "g_x", g_x, x.shape()), want_grad(op, "g_fn", g_fn, head_fn.shape());
  want_grad(op, "g_base", g_base, head_base.shape()), want_grad(op, "g_scale", g_scale, Shape{1});
  STRATA_DEVICE_DISPATCH(x.device(),
                         mhc_contract_backward(x, head_fn, head_base, head_scale, eps, g_out, g_x, g_fn, g_base, g_scale));
}

void mhc_stream_sum(const Tensor& x, int64_t n, double scale, const Tensor& out) {
  const char* op = "mhc_stream_sum";
  const int64_t C = check_streams(op, x, n);
  want(op, "out", out, Shape{x.size(0), C}, x.dtype());
  STRATA_DEVICE_DISPATCH(x.device(), mhc_stream_sum(x, n, scale, out));
}

void mhc_stream_broadcast(const Tensor& x, int64_t n, double scale, const Tensor& out) {
  const char* op = "mhc_stream_broadcast";
  STRATA_CHECK(x.defined() && x.dim() == 2 && x.is_contiguous(), op, ": x must be a contiguous [T, C]");
  check_float(x, op, "x");
  STRATA_CHECK(n >= 1, op, ": n = ", n, " streams, expected >= 1");
  want(op, "out", out, Shape{x.size(0), n * x.size(1)}, x.dtype());
  STRATA_DEVICE_DISPATCH(x.device(), mhc_stream_broadcast(x, n, scale, out));
}

}  // namespace strata::kernels
