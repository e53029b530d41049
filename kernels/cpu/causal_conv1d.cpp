// CPU reference of kernels/causal_conv1d.h: inputs read into contiguous host arrays of the
// accumulation type; dw/dbias/dx sums over (batch, time, tap) in index order, channels innermost.
// Reference: PyTorch nn.Conv1d(groups=C, padding=K−1)[..., :l] then F.silu.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/causal_conv1d.h"
#include "kernels/cpu/host_vectors.h"

namespace strata::kernels::cpu {
namespace {
template <typename T>
T sigmoid(T u) { return T(1) / (T(1) + std::exp(-u)); }

// The conv input at (batch, position t, channel) with t < 0 read from the history.
template <typename T>
struct Padded {
  const std::vector<T>& x;
  const std::vector<T>& hist;
  int64_t l, C, K;
  T at(int64_t bi, int64_t t, int64_t c) const {
    if (t >= 0) return x[(bi * l + t) * C + c];
    if (hist.empty()) return T(0);
    return hist[(bi * C + c) * (K - 1) + (K - 1 + t)];
  }
};

// xp [b, K−1+l, C]: the input with its K−1 earlier positions in front (history or zeros).
template <typename T>
std::vector<T> padded(const Padded<T>& in, int64_t b) {
  const int64_t C = in.C, R = in.K - 1 + in.l;
  std::vector<T> xp(static_cast<size_t>(b * R * C));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t r = 0; r < in.K - 1; ++r)
      for (int64_t c = 0; c < C; ++c) xp[(bi * R + r) * C + c] = in.at(bi, r - (in.K - 1), c);
    std::copy_n(&in.x[bi * in.l * C], in.l * C, &xp[(bi * R + in.K - 1) * C]);
  }
  return xp;
}

// u [b, l, C] = bias + Σ_k w[c, k]·x[t − (K−1) + k] (k in order; a zero-padded tap adds w·0, as the
// channel-by-channel form did), channels innermost.
template <typename T>
std::vector<T> pre_activations(const Padded<T>& in, const std::vector<T>& w, const std::vector<T>& bias,
                               int64_t b) {
  const int64_t C = in.C, K = in.K, l = in.l, R = K - 1 + l;
  const std::vector<T> xp = padded(in, b);
  std::vector<T> wT(static_cast<size_t>(K * C)), u(static_cast<size_t>(b * l * C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k) wT[k * C + c] = w[c * K + k];
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < l; ++t) {
      T* ut = &u[(bi * l + t) * C];
      std::copy(bias.begin(), bias.begin() + C, ut);
      for (int64_t k = 0; k < K; ++k) {
        const T* xr = &xp[(bi * R + t + k) * C];
        const T* wk = &wT[k * C];
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) ut[c] += wk[c] * xr[c];
      }
    }
  return u;
}

template <typename T>
void forward_impl(const Tensor& xt, const Tensor& wt, const Tensor& bt, const Tensor& ht, const Tensor& yt,
                  const Tensor& fh) {
  const int64_t b = xt.size(0), l = xt.size(1), C = xt.size(2), K = wt.size(1);
  const std::vector<T> x = host<T>(xt), w = host<T>(wt), bias = host<T>(bt), hist = host<T>(ht);
  const Padded<T> in{x, hist, l, C, K};
  std::vector<T> y = pre_activations(in, w, bias, b);
  for (T& v : y) v = v * sigmoid(v);
  store(yt, y);
  if (!fh.defined()) return;
  std::vector<T> f(static_cast<size_t>(b * C * (K - 1)));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < K - 1; ++j) f[(bi * C + c) * (K - 1) + j] = in.at(bi, l - (K - 1) + j, c);
  store(fh, f);
}

template <typename T>
void backward_impl(const Tensor& xt, const Tensor& wt, const Tensor& bt, const Tensor& dyt, const Tensor& dxt,
                   const Tensor& dwt, const Tensor& dbt) {
  const int64_t b = xt.size(0), l = xt.size(1), C = xt.size(2), K = wt.size(1);
  const std::vector<T> x = host<T>(xt), w = host<T>(wt), bias = host<T>(bt), dy = host<T>(dyt), none;
  const Padded<T> in{x, none, l, C, K};
  std::vector<T> du = pre_activations(in, w, bias, b), dx(x.size(), T(0)), dw = host<T>(dwt), db = host<T>(dbt);
  for (size_t i = 0; i < du.size(); ++i) {
    const T u = du[i], s = sigmoid(u);
    du[i] = dy[i] * s * (T(1) + u * (T(1) - s));
  }
  // Channels innermost (vectorized, contiguous rows); every element's terms are still added in
  // the order (batch, t, k), so the values are those of a channel-by-channel loop. w and dw are
  // read [K, C] (transposed) for the contiguous rows.
  std::vector<T> wT(static_cast<size_t>(K * C)), dwT(static_cast<size_t>(K * C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k) wT[k * C + c] = w[c * K + k], dwT[k * C + c] = dw[c * K + k];
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < l; ++t) {
      const T* g = &du[(bi * l + t) * C];
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) db[c] += g[c];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t src = t - (K - 1) + k;
        if (src < 0) continue;
        const T* xs = &x[(bi * l + src) * C];
        T* dxs = &dx[(bi * l + src) * C];
        T* dwk = &dwT[k * C];
        const T* wk = &wT[k * C];
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          dwk[c] += g[c] * xs[c];
          dxs[c] += g[c] * wk[c];
        }
      }
    }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k) dw[c * K + k] = dwT[k * C + c];
  store(dxt, dx);
  store(dwt, dw);
  store(dbt, db);
}
}  // namespace

void causal_conv1d_silu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& history,
                                const Tensor& y, const Tensor& final_history) {
  if (x.dtype() == DType::F64) forward_impl<double>(x, w, bias, history, y, final_history);
  else forward_impl<float>(x, w, bias, history, y, final_history);
}
void causal_conv1d_silu_backward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy,
                                 const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (x.dtype() == DType::F64) backward_impl<double>(x, w, bias, dy, dx, dw, dbias);
  else backward_impl<float>(x, w, bias, dy, dx, dw, dbias);
}

}  // namespace strata::kernels::cpu
