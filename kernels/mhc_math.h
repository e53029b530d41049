// Per-matrix Sinkhorn-Knopp math of kernels/mhc.h, shared by the CPU reference and the CUDA kernel
// (host/device functions over one n×n matrix, run by one thread). The backward is the exact
// reverse-mode derivative of the unrolled forward: it re-runs the forward from the logits into a
// trace (the softmax output and every normalisation step's output and divisors), then sweeps it in
// reverse. Reference: Megatron-LM dev hyper_connection.py (_sinkhorn_iterations, SinkhornKnopp) and
// fused_mhc_kernels.py (_triton_sinkhorn_bwd: stored per-iteration matrices and sums).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace strata::kernels::mhc_math {

STRATA_HD float exp_of(float u) { return expf(u); }
STRATA_HD double exp_of(double u) { return exp(u); }
STRATA_HD float sqrt_of(float u) { return sqrtf(u); }
STRATA_HD double sqrt_of(double u) { return sqrt(u); }

// Elements of one matrix's trace: (2·iterations) matrices of n² plus (2·iterations) divisor rows of n.
STRATA_HD int64_t sinkhorn_trace_size(int64_t n, int64_t iterations) {
  return 2 * iterations * n * n + 2 * iterations * n;
}

// Step s of the trace: 0 = the row softmax S (before + eps); s odd = a column normalisation,
// s even (≥ 2) = a row normalisation; steps 1 .. 2·iterations − 1.
template <typename T>
STRATA_HD void sinkhorn_forward_matrix(const T* L, int64_t n, int64_t iterations, T eps, T* out, T* trace) {
  T* S = trace;
  for (int64_t i = 0; i < n; ++i) {
    T mx = L[i * n];
    for (int64_t j = 1; j < n; ++j) mx = L[i * n + j] > mx ? L[i * n + j] : mx;
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (S[i * n + j] = exp_of(L[i * n + j] - mx));
    for (int64_t j = 0; j < n; ++j) S[i * n + j] /= sum;
  }
  for (int64_t e = 0; e < n * n; ++e) out[e] = S[e] + eps;
  T* divs = trace + 2 * iterations * n * n;
  for (int64_t s = 1; s < 2 * iterations; ++s) {
    const bool col = (s % 2) == 1;
    T* d = divs + s * n;
    for (int64_t a = 0; a < n; ++a) {
      T sum = 0;
      for (int64_t b = 0; b < n; ++b) sum += col ? out[b * n + a] : out[a * n + b];
      d[a] = sum + eps;
    }
    T* Ms = trace + s * n * n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) Ms[i * n + j] = out[i * n + j] = out[i * n + j] / d[col ? j : i];
  }
}

// g [n, n] (d loss / d out) → gL [n, n] (d loss / d L); trace as filled by the forward (scratch).
template <typename T>
STRATA_HD void sinkhorn_backward_matrix(const T* L, int64_t n, int64_t iterations, T eps, const T* g, T* gL,
                                        T* trace) {
  sinkhorn_forward_matrix(L, n, iterations, eps, gL, trace);  // gL as scratch for the output
  for (int64_t e = 0; e < n * n; ++e) gL[e] = g[e];
  const T* divs = trace + 2 * iterations * n * n;
  for (int64_t s = 2 * iterations - 1; s >= 1; --s) {
    const bool col = (s % 2) == 1;
    const T* Ms = trace + s * n * n;
    const T* d = divs + s * n;
    for (int64_t a = 0; a < n; ++a) {
      T dot = 0;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t e = col ? b * n + a : a * n + b;
        dot += gL[e] * Ms[e];
      }
      for (int64_t b = 0; b < n; ++b) {
        const int64_t e = col ? b * n + a : a * n + b;
        gL[e] = (gL[e] - dot) / d[a];
      }
    }
  }
  const T* S = trace;  // softmax: dL = S ⊙ (G − Σ_j G·S) per row; the + eps passes G through
  for (int64_t i = 0; i < n; ++i) {
    T dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += gL[i * n + j] * S[i * n + j];
    for (int64_t j = 0; j < n; ++j) gL[i * n + j] = S[i * n + j] * (gL[i * n + j] - dot);
  }
}

template <typename T>
STRATA_HD T sigmoid(T u) { return T(1) / (T(1) + exp_of(-u)); }

// The mapping gates of one token (Megatron dev _compute_h), shared by the fused mapping op and the
// unfused gate op. Mapping rows are [pre (n) | post (n) | res (n²)]; α group 0 pre, 1 post, 2 res.
STRATA_HD int64_t alpha_group(int64_t k, int64_t n) { return k < n ? 0 : (k < 2 * n ? 1 : 2); }

// The norm factor from ss = Σ_c x² over K columns: 1/(√ss/√K + eps), or rsqrt(ss/K + eps) inside.
template <typename T>
STRATA_HD T norm_factor(T ss, int64_t K, bool eps_inside_sqrt, T eps) {
  if (eps_inside_sqrt) return T(1) / sqrt_of(ss / T(K) + eps);
  return T(1) / (sqrt_of(ss) / sqrt_of(T(K)) + eps);
}
// d rinv / d ss (0 at ss = 0 with the eps outside, where the norm's derivative is undefined).
template <typename T>
STRATA_HD T norm_factor_dss(T ss, T rinv, int64_t K, bool eps_inside_sqrt) {
  if (eps_inside_sqrt) return -rinv * rinv * rinv / (T(2) * T(K));
  return ss > T(0) ? -rinv * rinv / (T(2) * sqrt_of(ss) * sqrt_of(T(K))) : T(0);
}

// proj [m], rinv → pre [n] = σ(h)+eps, post [n] = 2σ(h), res [n²] = h, with h = rinv·proj·α + bias.
template <typename T>
STRATA_HD void gates_forward(const T* proj, T rinv, const T* alpha, const T* bias, int64_t n, T pre_eps, T* pre,
                             T* post, T* res) {
  const int64_t m = n * n + 2 * n;
  for (int64_t k = 0; k < m; ++k) {
    const T h = rinv * proj[k] * alpha[alpha_group(k, n)] + bias[k];
    if (k < n) pre[k] = sigmoid(h) + pre_eps;
    else if (k < 2 * n) post[k - n] = T(2) * sigmoid(h);
    else res[k - 2 * n] = h;
  }
}
// The backward of gates_forward for one token: gpre [n], gpost [n], gres [n²] → dh [m] (d loss / d h),
// dproj [m] = dh·α·rinv; returns d loss / d rinv. dh·proj·rinv summed over a group is that α's gradient.
template <typename T>
STRATA_HD T gates_backward(const T* proj, T rinv, const T* alpha, const T* bias, int64_t n, const T* gpre,
                           const T* gpost, const T* gres, T* dh, T* dproj) {
  const int64_t m = n * n + 2 * n;
  T drinv = 0;
  for (int64_t k = 0; k < m; ++k) {
    const T a = alpha[alpha_group(k, n)], h = rinv * proj[k] * a + bias[k];
    T d;
    if (k < n) d = gpre[k] * sigmoid(h) * (T(1) - sigmoid(h));
    else if (k < 2 * n) d = T(2) * gpost[k - n] * sigmoid(h) * (T(1) - sigmoid(h));
    else d = gres[k - 2 * n];
    dh[k] = d;
    dproj[k] = d * a * rinv;
    drinv += d * proj[k] * a;
  }
  return drinv;
}

}  // namespace strata::kernels::mhc_math
