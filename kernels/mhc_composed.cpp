// The unfused mHC path composed from generic kernels (kernels/mhc_composed.h). Shapes: T tokens,
// n streams, C hidden, K = n·C, m = n² + 2n; an n-stream tensor [T, n·C] is viewed as [T, n, C].
// Every op first runs the fused op's argument checks (kernels/mhc_checks.h): bad input, one error.
// Reference: Megatron-LM dev hyper_connection.py (native_proj_rms, _compute_h, native_h_aggregate,
// native_h_post_bda).
#include "kernels/mhc_composed.h"

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/mhc_checks.h"

namespace strata::kernels {
namespace mhc_composed {
namespace {
// The mappings' dtype for activations x: f64 for f64, else f32.
DType acc_of(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }
// The dtype the products run in: f32 copies with keep_fp32 (16-bit activations), else x's dtype.
DType work_of(const Tensor& x, bool keep_fp32) { return keep_fp32 ? acc_of(x) : x.dtype(); }

// Rounds a mapping gradient g (acc dtype) to the activation dtype and back, unless the products
// ran in f32 (keep_fp32, or f32 / f64 activations: then a no-op).
void round_like(const Tensor& g, DType work) {
  if (work == g.dtype()) return;
  Tensor t = g;
  t.copy_(g.to(work));
}

// Runs f on a tensor of dtype `dt` holding g's values, and stores the result back into g (g itself
// when it already has that dtype).
template <typename F>
void in_dtype(const Tensor& g, DType dt, F&& f) {
  if (g.dtype() == dt) return f(g);
  Tensor t = g.to(dt);
  f(t);
  Tensor out = g;
  out.copy_(t);
}

// y + bias (bias undefined: y) in dtype `work`, [T, C].
Tensor y_plus_bias(const Tensor& y, const Tensor& bias, DType work) {
  const Tensor yw = y.to(work);
  if (!bias.defined()) return yw;
  Tensor out = Tensor::empty(y.shape(), work, y.device());
  add_bias(yw, bias.to(work), out);
  return out;
}
// t ⊙ post_scale (mask/(1−p), f32 / f64) with the product in that dtype, rounded once to `work`
// (as PyTorch's dropout applies its f32 scale to a bf16 tensor). t: `work` or the scale's dtype.
Tensor dropout_scaled(const Tensor& t, const Tensor& post_scale, DType work) {
  Tensor p = Tensor::empty(t.shape(), post_scale.dtype(), t.device());
  mul(t.to(post_scale.dtype()), post_scale.reshape(t.shape()), p);
  return p.to(work);
}
}  // namespace

void mhc_mappings_forward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                          const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                          const Tensor& h_res_logits, const Tensor& proj, const Tensor& rinv) {
  mhc_checks::mhc_mappings_forward(x, w, alpha, bias, o, h_pre, h_post, h_res_logits, proj, rinv);
  const int64_t T = x.size(0), K = x.size(1);
  if (T == 0) return;
  const Tensor xa = x.to(acc_of(x));  // native_proj_rms runs on x.float()
  gemm(xa, false, w, true, proj);     // proj [T, m] = x · Wᵀ
  Tensor ss = Tensor::empty({T, 1, 1}, xa.dtype(), x.device());
  gemm(xa.reshape({T, 1, K}), false, xa.reshape({T, 1, K}), true, ss);  // Σ_c x² per token
  mhc_compute_h_forward(proj, ss.reshape({T}), alpha, bias, K, o, h_pre, h_post, h_res_logits, rinv);
}

void mhc_mappings_backward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                           const Tensor& proj, const Tensor& rinv, const MhcMappingOptions& o, const Tensor& g_pre,
                           const Tensor& g_post, const Tensor& g_res_logits, const Tensor& g_x, const Tensor& g_w,
                           const Tensor& g_alpha, const Tensor& g_bias) {
  mhc_checks::mhc_mappings_backward(x, w, alpha, bias, proj, rinv, o, g_pre, g_post, g_res_logits, g_x, g_w, g_alpha,
                                    g_bias);
  const int64_t T = x.size(0), K = x.size(1), m = proj.size(1);
  if (T == 0) return;
  const DType a = acc_of(x);
  const Tensor xa = x.to(a);
  Tensor ss = Tensor::empty({T, 1, 1}, a, x.device());
  gemm(xa.reshape({T, 1, K}), false, xa.reshape({T, 1, K}), true, ss);
  Tensor g_proj = Tensor::empty({T, m}, a, x.device()), g_ss = Tensor::empty({T}, a, x.device());
  mhc_compute_h_backward(proj, ss.reshape({T}), alpha, bias, K, o, g_pre, g_post, g_res_logits, g_proj, g_ss, g_alpha,
                         g_bias);
  in_dtype(g_x, a, [&](const Tensor& gx) {
    gemm(g_proj, false, w, false, gx, 1.0, 1.0);  // g_x += g_proj [T, m] · W [m, K]
    gemm(g_ss.reshape({T, 1, 1}), false, xa.reshape({T, 1, K}), false, gx.reshape({T, 1, K}), 2.0, 1.0);  // += 2·g_ss·x
  });
  in_dtype(g_w, a, [&](const Tensor& gw) { gemm(g_proj, true, xa, false, gw, 1.0, 1.0); });  // g_W += g_projᵀ · x
}

void mhc_aggregate_forward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& out) {
  mhc_checks::mhc_aggregate_forward(x, h_pre, keep_fp32, out);
  const int64_t T = x.size(0), n = h_pre.size(1), C = x.size(1) / n;
  if (T == 0) return;
  const DType wk = work_of(x, keep_fp32);
  in_dtype(out, wk, [&](const Tensor& o) {
    gemm(h_pre.to(wk).reshape({T, 1, n}), false, x.to(wk).reshape({T, n, C}), false, o.reshape({T, 1, C}));
  });
}

void mhc_aggregate_backward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& g_out,
                            const Tensor& g_x, const Tensor& g_h_pre) {
  mhc_checks::mhc_aggregate_backward(x, h_pre, keep_fp32, g_out, g_x, g_h_pre);
  const int64_t T = x.size(0), n = h_pre.size(1), C = x.size(1) / n;
  if (T == 0) return;
  const DType wk = work_of(x, keep_fp32), a = acc_of(x);
  const Tensor g = g_out.to(wk).reshape({T, 1, C});
  in_dtype(g_x, a, [&](const Tensor& gx) {  // g_x_i += h_pre[i] · g
    gemm(h_pre.to(wk).reshape({T, 1, n}), true, g, false, gx.reshape({T, n, C}), 1.0, 1.0);
  });
  gemm(g, false, x.to(wk).reshape({T, n, C}), true, g_h_pre.reshape({T, 1, n}));  // g_h_pre[i] = Σ_C g · x_i
  round_like(g_h_pre, wk);
}

void mhc_merge_forward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y, const Tensor& bias,
                       const Tensor& post_scale, bool keep_fp32, const Tensor& out) {
  mhc_checks::mhc_merge_forward(x, h_res, h_post, y, bias, post_scale, keep_fp32, out);
  const int64_t T = x.size(0), n = h_post.size(1), C = x.size(1) / n;
  if (T == 0) return;
  const DType wk = work_of(x, keep_fp32);
  // h_post ⊗ (y + bias); with dropout kept in the scale's dtype until the mask is applied.
  Tensor post = Tensor::empty({T, n, C}, post_scale.defined() ? post_scale.dtype() : wk, x.device());
  gemm(h_post.to(wk).reshape({T, n, 1}), false, y_plus_bias(y, bias, wk).reshape({T, 1, C}), false, post);
  if (post_scale.defined()) post = dropout_scaled(post, post_scale, wk);  // dropout(h_post ⊗ (y + bias))
  in_dtype(out, wk, [&](const Tensor& o) {
    gemm(h_res.to(wk), true, x.to(wk).reshape({T, n, C}), false, o.reshape({T, n, C}));  // out_j = Σ_i H[i, j]·x_i
    add(o, post, o);
  });
}

void mhc_merge_backward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y, const Tensor& bias,
                        const Tensor& post_scale, bool keep_fp32, const Tensor& g_out, const Tensor& g_x,
                        const Tensor& g_h_res, const Tensor& g_h_post, const Tensor& g_y, const Tensor& g_bias) {
  mhc_checks::mhc_merge_backward(x, h_res, h_post, y, bias, post_scale, keep_fp32, g_out, g_x, g_h_res, g_h_post, g_y,
                           g_bias);
  const int64_t T = x.size(0), n = h_post.size(1), C = x.size(1) / n;
  if (T == 0) return;
  const DType wk = work_of(x, keep_fp32), a = acc_of(x);
  const Tensor g = g_out.to(wk).reshape({T, n, C}), xw = x.to(wk).reshape({T, n, C});
  in_dtype(g_x, a, [&](const Tensor& gx) {  // g_x_i += Σ_j H[i, j]·g_j
    gemm(h_res.to(wk), false, g, false, gx.reshape({T, n, C}), 1.0, 1.0);
  });
  gemm(xw, false, g, true, g_h_res);  // g_H[i, j] = Σ_C x_i·g_j
  round_like(g_h_res, wk);
  const Tensor gp = post_scale.defined() ? dropout_scaled(g, post_scale, wk) : g;  // g' = post_scale ⊙ g
  gemm(gp, false, y_plus_bias(y, bias, wk).reshape({T, 1, C}), true, g_h_post.reshape({T, n, 1}));
  round_like(g_h_post, wk);
  const Tensor gy = Tensor::empty({T, 1, C}, wk, x.device());
  gemm(h_post.to(wk).reshape({T, n, 1}), true, gp, false, gy);  // g_y = Σ_j h_post[j]·g'_j
  Tensor out = g_y;
  out.copy_(gy.reshape({T, C}));
  if (g_bias.defined()) bias_grad(gy.reshape({T, C}), g_bias, true);
}
}  // namespace mhc_composed

}  // namespace strata::kernels
