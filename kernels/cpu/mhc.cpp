// CPU reference of the mHC mapping computation, its gate op and the Sinkhorn projection (kernels/mhc.h) on host
// arrays of the accumulation type (f64 for f64 activations, else f32): the projection x·Wᵀ and its
// two transposed products on OpenBLAS (kernels/cpu/blas.h, single-threaded: a fixed k-order), the
// norm, gates and Sinkhorn one token at a time; bias/α gradients summed over tokens in order.
// Reference: Megatron-LM dev hyper_connection.py (native_proj_rms, _compute_h, SinkhornKnopp).
#include <cmath>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/host_vectors.h"
#include "kernels/mhc.h"
#include "kernels/mhc_math.h"

namespace strata::kernels::cpu {
namespace {
using mhc_math::alpha_group;

template <typename T>
T norm_factor(T ss, int64_t K, const MhcMappingOptions& o) {
  return mhc_math::norm_factor(ss, K, o.norm_eps_inside_sqrt, T(o.norm_eps));
}
template <typename T>
T sum_of_squares(const T* x, int64_t K) {
  T ss = 0;
  for (int64_t c = 0; c < K; ++c) ss += x[c] * x[c];
  return ss;
}

// The gates of every token from proj [T, m] and rinv [T] into pre [T, n], post [T, n], res [T, n²].
template <typename T>
void gates_forward(const std::vector<T>& proj, const std::vector<T>& rinv, const std::vector<T>& alpha,
                   const std::vector<T>& bias, int64_t T_, int64_t n, std::vector<T>& pre, std::vector<T>& post,
                   std::vector<T>& res) {
  const int64_t m = n * n + 2 * n;
  for (int64_t t = 0; t < T_; ++t)
    mhc_math::gates_forward(&proj[t * m], rinv[t], alpha.data(), bias.data(), n, T(kMhcPreEps), &pre[t * n],
                            &post[t * n], &res[t * n * n]);
}

// The gates' backward for every token: d(proj) [T, m] (returned) and d(rinv) [T] (drinv), with
// d(bias) and d(α) accumulated in token order.
template <typename T>
std::vector<T> gates_backward(const std::vector<T>& proj, const std::vector<T>& rinv, const std::vector<T>& alpha,
                              const std::vector<T>& bias, const std::vector<T>& gpre, const std::vector<T>& gpost,
                              const std::vector<T>& gres, int64_t T_, int64_t n, std::vector<T>& drinv,
                              std::vector<T>& ga, std::vector<T>& gb) {
  const int64_t m = n * n + 2 * n;
  std::vector<T> dproj(T_ * m), dh(m);
  drinv.assign(T_, T(0));
  for (int64_t t = 0; t < T_; ++t) {
    drinv[t] = mhc_math::gates_backward(&proj[t * m], rinv[t], alpha.data(), bias.data(), n, &gpre[t * n],
                                        &gpost[t * n], &gres[t * n * n], dh.data(), &dproj[t * m]);
    for (int64_t k = 0; k < m; ++k) {
      gb[k] += dh[k];
      ga[alpha_group(k, n)] += dh[k] * proj[t * m + k] * rinv[t];
    }
  }
  return dproj;
}

template <typename T>
void mappings_forward(const Tensor& xt, const Tensor& wt, const Tensor& at, const Tensor& bt,
                      const MhcMappingOptions& o, const Tensor& pre_t, const Tensor& post_t, const Tensor& res_t,
                      const Tensor& proj_t, const Tensor& rinv_t) {
  const int64_t T_ = xt.size(0), K = xt.size(1), n = o.n, m = n * n + 2 * n;
  const std::vector<T> x = host<T>(xt), w = host<T>(wt), alpha = host<T>(at), bias = host<T>(bt);
  std::vector<T> pre(T_ * n), post(T_ * n), res(T_ * n * n), proj(T_ * m), rinv(T_);
  gemm_split_over_openmp();  // OpenBLAS single-threaded: each element's k-order is fixed
  if (T_ > 0) mm(false, true, int(T_), int(m), int(K), 1.0, x.data(), int(K), w.data(), int(K), 0.0, proj.data(), int(m));
  for (int64_t t = 0; t < T_; ++t) rinv[t] = norm_factor(sum_of_squares(&x[t * K], K), K, o);
  gates_forward(proj, rinv, alpha, bias, T_, n, pre, post, res);
  store(pre_t, pre), store(post_t, post), store(res_t, res), store(proj_t, proj), store(rinv_t, rinv);
}

// d(h) → d(proj) [T, m] (the rows x·Wᵀ feed), accumulating d(bias), d(α) in token order, and the
// norm's share of d(x) (2·d(ss)·x per token) into gx.
template <typename T>
std::vector<T> mapping_proj_grads(const std::vector<T>& x, const std::vector<T>& alpha, const std::vector<T>& bias,
                                  const std::vector<T>& proj, const std::vector<T>& rinv, const std::vector<T>& gpre,
                                  const std::vector<T>& gpost, const std::vector<T>& gres, int64_t T_, int64_t K,
                                  const MhcMappingOptions& o, std::vector<T>& gx, std::vector<T>& ga,
                                  std::vector<T>& gb) {
  std::vector<T> drinv;
  std::vector<T> dproj = gates_backward(proj, rinv, alpha, bias, gpre, gpost, gres, T_, o.n, drinv, ga, gb);
  for (int64_t t = 0; t < T_; ++t) {
    const T* xr = &x[t * K];
    const T ss = sum_of_squares(xr, K);
    const T slope = T(2) * drinv[t] * mhc_math::norm_factor_dss(ss, rinv[t], K, o.norm_eps_inside_sqrt);
    for (int64_t c = 0; c < K; ++c) gx[t * K + c] += slope * xr[c];
  }
  return dproj;
}

template <typename T>
void mappings_backward(const Tensor& xt, const Tensor& wt, const Tensor& at, const Tensor& bt, const Tensor& proj_t,
                       const Tensor& rinv_t, const MhcMappingOptions& o, const Tensor& gpre_t, const Tensor& gpost_t,
                       const Tensor& gres_t, const Tensor& gx_t, const Tensor& gw_t, const Tensor& ga_t,
                       const Tensor& gb_t) {
  const int64_t T_ = xt.size(0), K = xt.size(1), n = o.n, m = n * n + 2 * n;
  const std::vector<T> x = host<T>(xt), w = host<T>(wt), alpha = host<T>(at), bias = host<T>(bt);
  const std::vector<T> proj = host<T>(proj_t), rinv = host<T>(rinv_t);
  const std::vector<T> gpre = host<T>(gpre_t), gpost = host<T>(gpost_t), gres = host<T>(gres_t);
  std::vector<T> gx = host<T>(gx_t), gw = host<T>(gw_t), ga = host<T>(ga_t), gb = host<T>(gb_t);
  const std::vector<T> dproj = mapping_proj_grads(x, alpha, bias, proj, rinv, gpre, gpost, gres, T_, K, o, gx, ga, gb);
  gemm_split_over_openmp();
  if (T_ > 0) {
    // gx [T, K] += dproj [T, m] · W [m, K];  gw [m, K] += dprojᵀ · x [T, K].
    mm(false, false, int(T_), int(K), int(m), 1.0, dproj.data(), int(m), w.data(), int(K), 1.0, gx.data(), int(K));
    mm(true, false, int(m), int(K), int(T_), 1.0, dproj.data(), int(m), x.data(), int(K), 1.0, gw.data(), int(K));
  }
  store(gx_t, gx), store(gw_t, gw), store(ga_t, ga), store(gb_t, gb);
}

template <typename T>
void compute_h_forward(const Tensor& proj_t, const Tensor& ss_t, const Tensor& at, const Tensor& bt, int64_t K,
                       const MhcMappingOptions& o, const Tensor& pre_t, const Tensor& post_t, const Tensor& res_t,
                       const Tensor& rinv_t) {
  const int64_t T_ = proj_t.size(0), n = o.n;
  const std::vector<T> proj = host<T>(proj_t), ss = host<T>(ss_t), alpha = host<T>(at), bias = host<T>(bt);
  std::vector<T> pre(T_ * n), post(T_ * n), res(T_ * n * n), rinv(T_);
  for (int64_t t = 0; t < T_; ++t) rinv[t] = norm_factor(ss[t], K, o);
  gates_forward(proj, rinv, alpha, bias, T_, n, pre, post, res);
  store(pre_t, pre), store(post_t, post), store(res_t, res), store(rinv_t, rinv);
}

template <typename T>
void compute_h_backward(const Tensor& proj_t, const Tensor& ss_t, const Tensor& at, const Tensor& bt, int64_t K,
                        const MhcMappingOptions& o, const Tensor& gpre_t, const Tensor& gpost_t, const Tensor& gres_t,
                        const Tensor& gproj_t, const Tensor& gss_t, const Tensor& ga_t, const Tensor& gb_t) {
  const int64_t T_ = proj_t.size(0);
  const std::vector<T> proj = host<T>(proj_t), ss = host<T>(ss_t), alpha = host<T>(at), bias = host<T>(bt);
  const std::vector<T> gpre = host<T>(gpre_t), gpost = host<T>(gpost_t), gres = host<T>(gres_t);
  std::vector<T> ga = host<T>(ga_t), gb = host<T>(gb_t), rinv(T_), drinv;
  for (int64_t t = 0; t < T_; ++t) rinv[t] = norm_factor(ss[t], K, o);
  const std::vector<T> dproj = gates_backward(proj, rinv, alpha, bias, gpre, gpost, gres, T_, o.n, drinv, ga, gb);
  std::vector<T> gss(T_);
  for (int64_t t = 0; t < T_; ++t) gss[t] = drinv[t] * mhc_math::norm_factor_dss(ss[t], rinv[t], K, o.norm_eps_inside_sqrt);
  store(gproj_t, dproj), store(gss_t, gss), store(ga_t, ga), store(gb_t, gb);
}

template <typename T>
void sinkhorn_forward(const Tensor& lt, int64_t iters, double eps, const Tensor& out_t) {
  const int64_t T_ = lt.size(0), n = lt.size(1);
  const std::vector<T> L = host<T>(lt);
  std::vector<T> out(L.size()), trace(mhc_math::sinkhorn_trace_size(n, iters));
  for (int64_t t = 0; t < T_; ++t)
    mhc_math::sinkhorn_forward_matrix(&L[t * n * n], n, iters, T(eps), &out[t * n * n], trace.data());
  store(out_t, out);
}

template <typename T>
void sinkhorn_backward(const Tensor& lt, int64_t iters, double eps, const Tensor& g_t, const Tensor& gl_t) {
  const int64_t T_ = lt.size(0), n = lt.size(1);
  const std::vector<T> L = host<T>(lt), g = host<T>(g_t);
  std::vector<T> gl(L.size()), trace(mhc_math::sinkhorn_trace_size(n, iters));
  for (int64_t t = 0; t < T_; ++t)
    mhc_math::sinkhorn_backward_matrix(&L[t * n * n], n, iters, T(eps), &g[t * n * n], &gl[t * n * n], trace.data());
  store(gl_t, gl);
}
}  // namespace

void mhc_mappings_forward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                          const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                          const Tensor& h_res_logits, const Tensor& proj, const Tensor& rinv) {
  if (x.dtype() == DType::F64) mappings_forward<double>(x, w, alpha, bias, o, h_pre, h_post, h_res_logits, proj, rinv);
  else mappings_forward<float>(x, w, alpha, bias, o, h_pre, h_post, h_res_logits, proj, rinv);
}
void mhc_mappings_backward(const Tensor& x, const Tensor& w, const Tensor& alpha, const Tensor& bias,
                           const Tensor& proj, const Tensor& rinv, const MhcMappingOptions& o, const Tensor& g_pre,
                           const Tensor& g_post, const Tensor& g_res_logits, const Tensor& g_x, const Tensor& g_w,
                           const Tensor& g_alpha, const Tensor& g_bias) {
  if (x.dtype() == DType::F64)
    mappings_backward<double>(x, w, alpha, bias, proj, rinv, o, g_pre, g_post, g_res_logits, g_x, g_w, g_alpha, g_bias);
  else mappings_backward<float>(x, w, alpha, bias, proj, rinv, o, g_pre, g_post, g_res_logits, g_x, g_w, g_alpha, g_bias);
}
void mhc_compute_h_forward(const Tensor& proj, const Tensor& sumsq, const Tensor& alpha, const Tensor& bias,
                           int64_t K, const MhcMappingOptions& o, const Tensor& h_pre, const Tensor& h_post,
                           const Tensor& h_res_logits, const Tensor& rinv) {
  if (proj.dtype() == DType::F64) compute_h_forward<double>(proj, sumsq, alpha, bias, K, o, h_pre, h_post, h_res_logits, rinv);
  else compute_h_forward<float>(proj, sumsq, alpha, bias, K, o, h_pre, h_post, h_res_logits, rinv);
}
void mhc_compute_h_backward(const Tensor& proj, const Tensor& sumsq, const Tensor& alpha, const Tensor& bias,
                            int64_t K, const MhcMappingOptions& o, const Tensor& g_pre, const Tensor& g_post,
                            const Tensor& g_res_logits, const Tensor& g_proj, const Tensor& g_sumsq,
                            const Tensor& g_alpha, const Tensor& g_bias) {
  if (proj.dtype() == DType::F64)
    compute_h_backward<double>(proj, sumsq, alpha, bias, K, o, g_pre, g_post, g_res_logits, g_proj, g_sumsq, g_alpha, g_bias);
  else compute_h_backward<float>(proj, sumsq, alpha, bias, K, o, g_pre, g_post, g_res_logits, g_proj, g_sumsq, g_alpha, g_bias);
}
void mhc_sinkhorn_forward(const Tensor& logits, int64_t iterations, double eps, const Tensor& out) {
  if (logits.dtype() == DType::F64) sinkhorn_forward<double>(logits, iterations, eps, out);
  else sinkhorn_forward<float>(logits, iterations, eps, out);
}
void mhc_sinkhorn_backward(const Tensor& logits, int64_t iterations, double eps, const Tensor& g_out,
                           const Tensor& g_logits) {
  if (logits.dtype() == DType::F64) sinkhorn_backward<double>(logits, iterations, eps, g_out, g_logits);
  else sinkhorn_backward<float>(logits, iterations, eps, g_out, g_logits);
}

}  // namespace strata::kernels::cpu
