// An independent float64 reference of the mHC math for the tests (plain loops over std::vector,
// written from the spec's formulas, sharing no code with kernels/): mappings, Sinkhorn,
// aggregation, merge and the learned contraction. Layouts as kernels/mhc.h: x [T, n·C]
// stream-major, mapping rows [pre n | post n | res n²].
// Reference: Megatron-LM dev megatron/core/transformer/hyper_connection.py.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace strata::test::mhc_ref {

using V = std::vector<double>;
inline double sig(double u) { return 1.0 / (1.0 + std::exp(-u)); }

struct Maps {
  V pre, post, res_logits;
};

inline Maps mappings(const V& x, const V& w, const V& alpha, const V& bias, int64_t T, int64_t n, int64_t C,
                     bool eps_inside_sqrt, double eps) {
  const int64_t K = n * C, m = n * n + 2 * n;
  Maps out{V(T * n), V(T * n), V(T * n * n)};
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t c = 0; c < K; ++c) ss += x[t * K + c] * x[t * K + c];
    const double r = eps_inside_sqrt ? 1.0 / std::sqrt(ss / K + eps) : 1.0 / (std::sqrt(ss) / std::sqrt(double(K)) + eps);
    for (int64_t k = 0; k < m; ++k) {
      double p = 0;
      for (int64_t c = 0; c < K; ++c) p += w[k * K + c] * x[t * K + c];
      const double a = k < n ? alpha[0] : (k < 2 * n ? alpha[1] : alpha[2]);
      const double h = p * a * r + bias[k];
      if (k < n) out.pre[t * n + k] = sig(h) + 1e-6;
      else if (k < 2 * n) out.post[t * n + k - n] = 2 * sig(h);
      else out.res_logits[t * n * n + k - 2 * n] = h;
    }
  }
  return out;
}

inline V sinkhorn(const V& L, int64_t T, int64_t n, int64_t iterations, double eps) {
  V out(L.size());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<V> M(n, V(n));
    for (int64_t i = 0; i < n; ++i) {
      double mx = -1e300, s = 0;
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, L[(t * n + i) * n + j]);
      for (int64_t j = 0; j < n; ++j) s += std::exp(L[(t * n + i) * n + j] - mx);
      for (int64_t j = 0; j < n; ++j) M[i][j] = std::exp(L[(t * n + i) * n + j] - mx) / s + eps;
    }
    auto cols = [&] {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += M[i][j];
        for (int64_t i = 0; i < n; ++i) M[i][j] /= s + eps;
      }
    };
    auto rows = [&] {
      for (int64_t i = 0; i < n; ++i) {
        double s = 0;
        for (int64_t j = 0; j < n; ++j) s += M[i][j];
        for (int64_t j = 0; j < n; ++j) M[i][j] /= s + eps;
      }
    };
    cols();
    for (int64_t it = 1; it < iterations; ++it) rows(), cols();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) out[(t * n + i) * n + j] = M[i][j];
  }
  return out;
}

inline V aggregate(const V& x, const V& h_pre, int64_t T, int64_t n, int64_t C) {
  V out(T * C, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c) out[t * C + c] += h_pre[t * n + i] * x[(t * n + i) * C + c];
  return out;
}

// out_j = Σ_i h_res[i][j] x_i + scale_j ⊙ h_post[j] (y + bias); empty bias / scale: none / 1.
inline V merge(const V& x, const V& h_res, const V& h_post, const V& y, const V& bias, const V& scale, int64_t T,
               int64_t n, int64_t C) {
  V out(T * n * C, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t e = (t * n + j) * C + c;
        double v = h_post[t * n + j] * (y[t * C + c] + (bias.empty() ? 0.0 : bias[c]));
        if (!scale.empty()) v *= scale[e];
        for (int64_t i = 0; i < n; ++i) v += h_res[(t * n + i) * n + j] * x[(t * n + i) * C + c];
        out[e] = v;
      }
  return out;
}

inline V contract(const V& x, const V& fn, const V& base, double scale, int64_t T, int64_t n, int64_t C, double eps) {
  const int64_t K = n * C;
  V out(T * C, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) ss += x[t * K + k] * x[t * K + k];
    const double rs = 1.0 / std::sqrt(ss / K + eps);
    for (int64_t j = 0; j < n; ++j) {
      double mix = 0;
      for (int64_t k = 0; k < K; ++k) mix += x[t * K + k] * fn[j * K + k];
      const double pre = sig(mix * rs * scale + base[j]) + eps;
      for (int64_t c = 0; c < C; ++c) out[t * C + c] += pre * x[t * K + j * C + c];
    }
  }
  return out;
}

}  // namespace strata::test::mhc_ref
