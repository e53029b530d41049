// CPU reference of the mHC stream ops (kernels/mhc.h): aggregation, merge, learned contraction,
// stream sum and broadcast. Plain loops over host arrays of the accumulation type (f64 for f64
// activations, else f32); with keep_fp32 = false the mappings and their gradients are rounded to
// the activation dtype (round_to) where they meet the streams; outputs rounded once when stored.
// Reference: Megatron-LM dev hyper_connection.py (native_h_aggregate, NativeHAggregateInto,
// native_h_post_bda, _torch_h_post_bda_bwd, learned_output_contract, input_expand, output_contract).
#include <cmath>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/host_vectors.h"
#include "kernels/mhc.h"
#include "kernels/mhc_math.h"

namespace strata::kernels::cpu {
namespace {
// v rounded to the activation dtype (a no-op for f32 / f64).
template <typename T>
T round_to(DType d, T v) {
  if (d == DType::BF16) return T(static_cast<float>(bfloat16(static_cast<float>(v))));
  if (d == DType::F16) return T(static_cast<float>(float16(static_cast<float>(v))));
  if (d == DType::F32) return T(static_cast<float>(v));
  return v;
}
// The mappings as applied: rounded to the activation dtype unless keep_fp32.
template <typename T>
std::vector<T> applied(const Tensor& h, DType act, bool keep_fp32) {
  std::vector<T> v = host<T>(h);
  if (!keep_fp32)
    for (T& e : v) e = round_to(act, e);
  return v;
}

template <typename T>
void aggregate_forward(const Tensor& xt, const Tensor& ht, bool keep, const Tensor& out_t) {
  const int64_t T_ = xt.size(0), n = ht.size(1), C = xt.size(1) / n;
  const std::vector<T> x = host<T>(xt), h = applied<T>(ht, xt.dtype(), keep);
  std::vector<T> out(T_ * C);
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t c = 0; c < C; ++c) {
      T acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += h[t * n + i] * x[(t * n + i) * C + c];
      out[t * C + c] = acc;
    }
  store(out_t, out);
}

template <typename T>
void aggregate_backward(const Tensor& xt, const Tensor& ht, bool keep, const Tensor& g_t, const Tensor& gx_t,
                        const Tensor& gh_t) {
  const int64_t T_ = xt.size(0), n = ht.size(1), C = xt.size(1) / n;
  const std::vector<T> x = host<T>(xt), h = applied<T>(ht, xt.dtype(), keep), g = host<T>(g_t);
  std::vector<T> gx = host<T>(gx_t), gh(T_ * n);
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t i = 0; i < n; ++i) {
      T acc = 0;
      for (int64_t c = 0; c < C; ++c) {
        gx[(t * n + i) * C + c] += g[t * C + c] * h[t * n + i];
        acc += g[t * C + c] * x[(t * n + i) * C + c];
      }
      gh[t * n + i] = keep ? acc : round_to(xt.dtype(), acc);
    }
  store(gx_t, gx), store(gh_t, gh);
}

template <typename T>
void merge_forward(const Tensor& xt, const Tensor& hr_t, const Tensor& hp_t, const Tensor& yt, const Tensor& bt,
                   const Tensor& ps_t, bool keep, const Tensor& out_t) {
  const int64_t T_ = xt.size(0), n = hp_t.size(1), C = xt.size(1) / n;
  const DType act = xt.dtype();
  const std::vector<T> x = host<T>(xt), hr = applied<T>(hr_t, act, keep), hp = applied<T>(hp_t, act, keep);
  const std::vector<T> y = host<T>(yt), b = host<T>(bt), ps = host<T>(ps_t);
  std::vector<T> out(x.size());
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < C; ++c) {
        T mixed = 0;
        for (int64_t i = 0; i < n; ++i) mixed += hr[(t * n + i) * n + j] * x[(t * n + i) * C + c];
        const int64_t e = (t * n + j) * C + c;
        const T post = hp[t * n + j];
        T expanded = post * y[t * C + c] + (b.empty() ? T(0) : post * b[c]);
        if (!ps.empty()) expanded *= ps[e];
        out[e] = mixed + expanded;
      }
  store(out_t, out);
}

template <typename T>
void merge_backward(const Tensor& xt, const Tensor& hr_t, const Tensor& hp_t, const Tensor& yt, const Tensor& bt,
                    const Tensor& ps_t, bool keep, const Tensor& g_t, const Tensor& gx_t, const Tensor& ghr_t,
                    const Tensor& ghp_t, const Tensor& gy_t, const Tensor& gb_t) {
  const int64_t T_ = xt.size(0), n = hp_t.size(1), C = xt.size(1) / n;
  const DType act = xt.dtype();
  const std::vector<T> x = host<T>(xt), hr = applied<T>(hr_t, act, keep), hp = applied<T>(hp_t, act, keep);
  const std::vector<T> y = host<T>(yt), b = host<T>(bt), ps = host<T>(ps_t), g = host<T>(g_t);
  std::vector<T> gx = host<T>(gx_t), ghr(T_ * n * n), ghp(T_ * n), gy(T_ * C), gb = host<T>(gb_t);
  auto gpost = [&](int64_t e) { return ps.empty() ? g[e] : ps[e] * g[e]; };  // through the dropout scale
  for (int64_t t = 0; t < T_; ++t) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += hr[(t * n + i) * n + j] * g[(t * n + j) * C + c];
        gx[(t * n + i) * C + c] += acc;
      }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T acc = 0;
        for (int64_t c = 0; c < C; ++c) acc += x[(t * n + i) * C + c] * g[(t * n + j) * C + c];
        ghr[(t * n + i) * n + j] = keep ? acc : round_to(act, acc);
      }
    for (int64_t j = 0; j < n; ++j) {
      T acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += gpost((t * n + j) * C + c) * (y[t * C + c] + (b.empty() ? T(0) : b[c]));
      ghp[t * n + j] = keep ? acc : round_to(act, acc);
    }
    for (int64_t c = 0; c < C; ++c) {
      T acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += hp[t * n + j] * gpost((t * n + j) * C + c);
      gy[t * C + c] = acc;
      if (!gb.empty()) gb[c] += acc;
    }
  }
  store(gx_t, gx), store(ghr_t, ghr), store(ghp_t, ghp), store(gy_t, gy), store(gb_t, gb);
}

// The contraction's per-token quantities: rs, dot_j = x·fn_j, sig_j = σ(dot_j·rs·scale + base_j).
template <typename T>
void contract_token(const T* x, const std::vector<T>& fn, const std::vector<T>& base, T scale, int64_t n, int64_t K,
                    double eps, T& rs, T* dot, T* sig) {
  T ss = 0;
  for (int64_t k = 0; k < K; ++k) ss += x[k] * x[k];
  rs = T(1) / std::sqrt(ss / T(K) + T(eps));
  for (int64_t j = 0; j < n; ++j) {
    T d = 0;
    for (int64_t k = 0; k < K; ++k) d += x[k] * fn[j * K + k];
    dot[j] = d;
    sig[j] = mhc_math::sigmoid(d * rs * scale + base[j]);
  }
}

template <typename T>
void contract_forward(const Tensor& xt, const Tensor& fn_t, const Tensor& base_t, const Tensor& scale_t, double eps,
                      const Tensor& out_t) {
  const int64_t T_ = xt.size(0), K = xt.size(1), n = fn_t.size(0), C = K / n;
  const std::vector<T> x = host<T>(xt), fn = host<T>(fn_t), base = host<T>(base_t), scale = host<T>(scale_t);
  std::vector<T> out(T_ * C), dot(n), pre(n);
  for (int64_t t = 0; t < T_; ++t) {
    T rs;
    contract_token(&x[t * K], fn, base, scale[0], n, K, eps, rs, dot.data(), pre.data());
    for (int64_t c = 0; c < C; ++c) {
      T acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += (pre[j] + T(eps)) * x[t * K + j * C + c];
      out[t * C + c] = acc;
    }
  }
  store(out_t, out);
}

template <typename T>
void contract_backward(const Tensor& xt, const Tensor& fn_t, const Tensor& base_t, const Tensor& scale_t, double eps,
                       const Tensor& g_t, const Tensor& gx_t, const Tensor& gfn_t, const Tensor& gbase_t,
                       const Tensor& gscale_t) {
  const int64_t T_ = xt.size(0), K = xt.size(1), n = fn_t.size(0), C = K / n;
  const std::vector<T> x = host<T>(xt), fn = host<T>(fn_t), base = host<T>(base_t), scale = host<T>(scale_t);
  const std::vector<T> g = host<T>(g_t);
  std::vector<T> gx = host<T>(gx_t), gfn = host<T>(gfn_t), gbase = host<T>(gbase_t), gscale = host<T>(gscale_t);
  std::vector<T> dot(n), pre(n), dmix(n);
  for (int64_t t = 0; t < T_; ++t) {
    const T* xr = &x[t * K];
    T rs, drs = 0;
    contract_token(xr, fn, base, scale[0], n, K, eps, rs, dot.data(), pre.data());
    for (int64_t j = 0; j < n; ++j) {
      T gpre = 0;
      for (int64_t c = 0; c < C; ++c) gpre += g[t * C + c] * xr[j * C + c];
      const T s = pre[j], dz = gpre * s * (T(1) - s);
      gbase[j] += dz;
      gscale[0] += dz * dot[j] * rs;
      dmix[j] = dz * scale[0];
      drs += dmix[j] * dot[j];
    }
    const T slope = -drs * rs * rs * rs / T(K);
    for (int64_t k = 0; k < K; ++k) {
      T acc = (pre[k / C] + T(eps)) * g[t * C + k % C] + slope * xr[k];
      for (int64_t j = 0; j < n; ++j) {
        acc += dmix[j] * rs * fn[j * K + k];
        gfn[j * K + k] += dmix[j] * rs * xr[k];
      }
      gx[t * K + k] += acc;
    }
  }
  store(gx_t, gx), store(gfn_t, gfn), store(gbase_t, gbase), store(gscale_t, gscale);
}

template <typename T>
void stream_sum(const Tensor& xt, int64_t n, double scale, const Tensor& out_t) {
  const int64_t T_ = xt.size(0), C = xt.size(1) / n;
  const std::vector<T> x = host<T>(xt);
  std::vector<T> out(T_ * C);
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t c = 0; c < C; ++c) {
      T acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += x[(t * n + j) * C + c];
      out[t * C + c] = T(scale) * acc;
    }
  store(out_t, out);
}

template <typename T>
void stream_broadcast(const Tensor& xt, int64_t n, double scale, const Tensor& out_t) {
  const int64_t T_ = xt.size(0), C = xt.size(1);
  const std::vector<T> x = host<T>(xt);
  std::vector<T> out(T_ * n * C);
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < C; ++c) out[(t * n + j) * C + c] = T(scale) * x[t * C + c];
  store(out_t, out);
}
}  // namespace

void mhc_aggregate_forward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& out) {
  if (x.dtype() == DType::F64) aggregate_forward<double>(x, h_pre, keep_fp32, out);
  else aggregate_forward<float>(x, h_pre, keep_fp32, out);
}
void mhc_aggregate_backward(const Tensor& x, const Tensor& h_pre, bool keep_fp32, const Tensor& g_out,
                            const Tensor& g_x, const Tensor& g_h_pre) {
  if (x.dtype() == DType::F64) aggregate_backward<double>(x, h_pre, keep_fp32, g_out, g_x, g_h_pre);
  else aggregate_backward<float>(x, h_pre, keep_fp32, g_out, g_x, g_h_pre);
}
void mhc_merge_forward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                       const Tensor& bias, const Tensor& post_scale, bool keep_fp32, const Tensor& out) {
  if (x.dtype() == DType::F64) merge_forward<double>(x, h_res, h_post, y, bias, post_scale, keep_fp32, out);
  else merge_forward<float>(x, h_res, h_post, y, bias, post_scale, keep_fp32, out);
}
void mhc_merge_backward(const Tensor& x, const Tensor& h_res, const Tensor& h_post, const Tensor& y,
                        const Tensor& bias, const Tensor& post_scale, bool keep_fp32, const Tensor& g_out,
                        const Tensor& g_x, const Tensor& g_h_res, const Tensor& g_h_post, const Tensor& g_y,
                        const Tensor& g_bias) {
  if (x.dtype() == DType::F64)
    merge_backward<double>(x, h_res, h_post, y, bias, post_scale, keep_fp32, g_out, g_x, g_h_res, g_h_post, g_y, g_bias);
  else merge_backward<float>(x, h_res, h_post, y, bias, post_scale, keep_fp32, g_out, g_x, g_h_res, g_h_post, g_y, g_bias);
}
void mhc_contract_forward(const Tensor& x, const Tensor& head_fn, const Tensor& head_base, const Tensor& head_scale,
                          double eps, const Tensor& out) {
  if (x.dtype() == DType::F64) contract_forward<double>(x, head_fn, head_base, head_scale, eps, out);
  else contract_forward<float>(x, head_fn, head_base, head_scale, eps, out);
}
void mhc_contract_backward(const Tensor& x, const Tensor& head_fn, const Tensor& head_base, const Tensor& head_scale,
                           double eps, const Tensor& g_out, const Tensor& g_x, const Tensor& g_fn,
                           const Tensor& g_base, const Tensor& g_scale) {
  if (x.dtype() == DType::F64)
    contract_backward<double>(x, head_fn, head_base, head_scale, eps, g_out, g_x, g_fn, g_base, g_scale);
  else contract_backward<float>(x, head_fn, head_base, head_scale, eps, g_out, g_x, g_fn, g_base, g_scale);
}
void mhc_stream_sum(const Tensor& x, int64_t n, double scale, const Tensor& out) {
  if (x.dtype() == DType::F64) stream_sum<double>(x, n, scale, out);
  else stream_sum<float>(x, n, scale, out);
}
void mhc_stream_broadcast(const Tensor& x, int64_t n, double scale, const Tensor& out) {
  if (x.dtype() == DType::F64) stream_broadcast<double>(x, n, scale, out);
  else stream_broadcast<float>(x, n, scale, out);
}

}  // namespace strata::kernels::cpu
