// CPU reference of the mHC mapping computation and Sinkhorn projection (kernels/mhc.h) on host
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
// Which α a mapping row uses: 0 pre, 1 post, 2 res.
int64_t alpha_group(int64_t k, int64_t n) { return k < n ? 0 : (k < 2 * n ? 1 : 2); }

template <typename T>
T norm_factor(T sum_sq, int64_t K, const MhcMappingOptions& o) {
  if (o.norm_eps_inside_sqrt) return T(1) / std::sqrt(sum_sq / T(K) + T(o.norm_eps));
  return T(1) / (std::sqrt(sum_sq) / std::sqrt(T(K)) + T(o.norm_eps));
}
// d rinv / d x_c = factor · x_c.
template <typename T>
T norm_factor_slope(T sum_sq, T rinv, int64_t K, const MhcMappingOptions& o) {
  if (o.norm_eps_inside_sqrt) return -rinv * rinv * rinv / T(K);
  const T norm = std::sqrt(sum_sq);
  return norm > T(0) ? -rinv * rinv / (norm * std::sqrt(T(K))) : T(0);
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
  for (int64_t t = 0; t < T_; ++t) {
    const T* xr = &x[t * K];
    T ss = 0;
    for (int64_t c = 0; c < K; ++c) ss += xr[c] * xr[c];
    rinv[t] = norm_factor(ss, K, o);
    for (int64_t k = 0; k < m; ++k) {
      const T h = rinv[t] * proj[t * m + k] * alpha[alpha_group(k, n)] + bias[k];
      if (k < n) pre[t * n + k] = mhc_math::sigmoid(h) + T(kMhcPreEps);
      else if (k < 2 * n) post[t * n + k - n] = T(2) * mhc_math::sigmoid(h);
      else res[t * n * n + k - 2 * n] = h;
    }
  }
  store(pre_t, pre), store(post_t, post), store(res_t, res), store(proj_t, proj), store(rinv_t, rinv);
}

// d(h) → d(proj) [T, m] (the rows x·Wᵀ feed), accumulating d(bias), d(α) in token order, and the
// norm's share of d(x) (slope·x per token) into gx.
template <typename T>
std::vector<T> mapping_proj_grads(const std::vector<T>& x, const std::vector<T>& alpha, const std::vector<T>& bias,
                                  const std::vector<T>& proj, const std::vector<T>& rinv, const std::vector<T>& gpre,
                                  const std::vector<T>& gpost, const std::vector<T>& gres, int64_t T_, int64_t K,
                                  const MhcMappingOptions& o, std::vector<T>& gx, std::vector<T>& ga,
                                  std::vector<T>& gb) {
  const int64_t n = o.n, m = n * n + 2 * n;
  std::vector<T> dproj(T_ * m);
  for (int64_t t = 0; t < T_; ++t) {
    const T* xr = &x[t * K];
    T drinv = 0;
    for (int64_t k = 0; k < m; ++k) {
      const int64_t g = alpha_group(k, n);
      const T p = proj[t * m + k], h = rinv[t] * p * alpha[g] + bias[k];
      T dh;
      if (k < n) dh = gpre[t * n + k] * mhc_math::sigmoid(h) * (T(1) - mhc_math::sigmoid(h));
      else if (k < 2 * n) dh = T(2) * gpost[t * n + k - n] * mhc_math::sigmoid(h) * (T(1) - mhc_math::sigmoid(h));
      else dh = gres[t * n * n + k - 2 * n];
      gb[k] += dh;
      ga[g] += dh * p * rinv[t];
      drinv += dh * p * alpha[g];
      dproj[t * m + k] = dh * alpha[g] * rinv[t];
    }
    T ss = 0;
    for (int64_t c = 0; c < K; ++c) ss += xr[c] * xr[c];
    const T slope = drinv * norm_factor_slope(ss, rinv[t], K, o);
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
