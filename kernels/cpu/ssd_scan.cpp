// CPU reference of kernels/ssd_scan.h, forward: the chunked SSD form (per batch × group: the
// chunk's C·B products once, then each head's inter-chunk term, diagonal block and chunk state,
// every dot product summed over n in order and vectorized across p / j) and the token-by-token
// recurrence (the tests' reference). Parallel over batch × group, so nothing depends on the thread
// count. The backward is kernels/cpu/ssd_scan_backward.cpp.
// Reference: Mamba-2 (Dao & Gu 2024) ssd_minimal_discrete; the recurrence
// S_t = exp(dt_t·A)·S_{t−1} + dt_t·x_t⊗B_t, y_t = S_t·C_t + D·x_t.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ssd_scan_host.h"

namespace strata::kernels::cpu {
namespace {
using namespace ssd;

// Scratch of one (batch, group) forward: the chunk's B transposed [N, Q] and C·B products
// [Q, Q] (shared by the group's heads), and one head's cumulative a, S transposed [N, P], the
// chunk's own state [P, N] and the inter-chunk dot products [P].
template <typename T>
struct ChunkScratch {
  std::vector<T> BT, CB, cs, ST, Sc, acc;
  explicit ChunkScratch(const Dims& d)
      : BT(d.N * d.Q), CB(d.Q * d.Q), cs(d.Q), ST(d.N * d.P), Sc(d.P * d.N), acc(d.P) {}
};

// CB[i, j] = C_i·B_j (j ≤ i) of the chunk [t0, t0 + L) of group g, each a sum over n in order.
template <typename T>
STRATA_SSD_CLONES void chunk_cb(const Host<T>& a, const Dims& d, int64_t bi, int64_t g, int64_t t0, int64_t L, ChunkScratch<T>& w) {
  const int64_t N = d.N, Q = d.Q;
  for (int64_t j = 0; j < L; ++j)
    for (int64_t n = 0; n < N; ++n) w.BT[n * Q + j] = a.B[d.bi_(bi, t0 + j, g) + n];
  for (int64_t i = 0; i < L; ++i) {
    T* cb = &w.CB[i * Q];
    std::fill(cb, cb + i + 1, T(0));
    const T* Ci = &a.C[d.bi_(bi, t0 + i, g)];
    for (int64_t n = 0; n < N; ++n) {
      const T c = Ci[n];
      const T* bt = &w.BT[n * Q];
#pragma omp simd
      for (int64_t j = 0; j <= i; ++j) cb[j] += c * bt[j];
    }
  }
}

// One head's chunk [t0, t0 + L): y rows and the carried state S [P, N] (in: the state before the
// chunk, out: after it). Every value is summed in the same order as the token-by-token form of
// the SSD chunk (dot products over n, then the diagonal block's terms j = 0..i).
template <typename T>
STRATA_SSD_CLONES void chunk_head(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, int64_t t0, int64_t L, ChunkScratch<T>& w,
                std::vector<T>& y, T* S) {
  const int64_t g = h / d.heads_per_group(), P = d.P, N = d.N, Q = d.Q;
  T run = 0;
  for (int64_t i = 0; i < L; ++i) w.cs[i] = run += a.dt[d.ti(bi, t0 + i, h)] * a.A[h];
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n) w.ST[n * P + p] = S[p * N + n];
  for (int64_t i = 0; i < L; ++i) {
    const T* Ci = &a.C[d.bi_(bi, t0 + i, g)];
    const T* xi = &a.x[d.xi(bi, t0 + i, h)];
    T* yi = &y[d.xi(bi, t0 + i, h)];
    T* acc = w.acc.data();
    std::fill(acc, acc + P, T(0));
    for (int64_t n = 0; n < N; ++n) {  // inter-chunk term C_i·S[p, :] for every p at once
      const T c = Ci[n];
      const T* st = &w.ST[n * P];
#pragma omp simd
      for (int64_t p = 0; p < P; ++p) acc[p] += c * st[p];
    }
    const T off = std::exp(w.cs[i]), Dh = a.D[h];
#pragma omp simd
    for (int64_t p = 0; p < P; ++p) yi[p] = off * acc[p] + Dh * xi[p];
    for (int64_t j = 0; j <= i; ++j) {  // intra-chunk (diagonal block) term
      const T wt = w.CB[i * Q + j] * std::exp(w.cs[i] - w.cs[j]) * a.dt[d.ti(bi, t0 + j, h)];
      const T* xj = &a.x[d.xi(bi, t0 + j, h)];
#pragma omp simd
      for (int64_t p = 0; p < P; ++p) yi[p] += wt * xj[p];
    }
  }
  std::fill(w.Sc.begin(), w.Sc.end(), T(0));
  for (int64_t j = 0; j < L; ++j) {  // the chunk's own end state
    const T wt = std::exp(w.cs[L - 1] - w.cs[j]) * a.dt[d.ti(bi, t0 + j, h)];
    const T* Bj = &a.B[d.bi_(bi, t0 + j, g)];
    const T* xj = &a.x[d.xi(bi, t0 + j, h)];
    for (int64_t p = 0; p < P; ++p) {
      const T wx = wt * xj[p];
      T* sc = &w.Sc[p * N];
#pragma omp simd
      for (int64_t n = 0; n < N; ++n) sc[n] += wx * Bj[n];
    }
  }
  const T decay = std::exp(w.cs[L - 1]);  // inter-chunk scan
#pragma omp simd
  for (int64_t k = 0; k < P * N; ++k) S[k] = decay * S[k] + w.Sc[k];
}

// One (batch, group) by chunks: the chunk's C·B once, then each of the group's heads.
template <typename T>
void chunked_group(const Host<T>& a, const Dims& d, int64_t bi, int64_t g, std::vector<T>& y, std::vector<T>& S) {
  ChunkScratch<T> w(d);
  for (int64_t t0 = 0; t0 < d.l; t0 += d.Q) {
    const int64_t L = std::min(d.Q, d.l - t0);
    chunk_cb(a, d, bi, g, t0, L, w);
    for (int64_t h = g * d.heads_per_group(); h < (g + 1) * d.heads_per_group(); ++h)
      chunk_head(a, d, bi, h, t0, L, w, y, &S[d.si(bi, h)]);
  }
}

// One token of the recurrence on state S [P, N]; writes y_t when yt is not null.
template <typename T>
void step(const Host<T>& a, const Dims& d, int64_t bi, int64_t t, int64_t h, T* S, T* yt) {
  const int64_t g = h / d.heads_per_group(), P = d.P, N = d.N;
  const T dt = a.dt[d.ti(bi, t, h)], decay = std::exp(dt * a.A[h]);
  const T* Bt = &a.B[d.bi_(bi, t, g)];
  const T* Ct = &a.C[d.bi_(bi, t, g)];
  const T* xt = &a.x[d.xi(bi, t, h)];
  for (int64_t p = 0; p < P; ++p) {
    T acc = 0;
    for (int64_t n = 0; n < N; ++n) {
      T& s = S[p * N + n];
      s = decay * s + dt * xt[p] * Bt[n];
      acc += s * Ct[n];
    }
    if (yt) yt[p] = acc + a.D[h] * xt[p];
  }
}

template <typename T>
void forward_impl(const SsdScanInputs& in, const Tensor& y_out, const Tensor& final_state, bool chunked) {
  const Dims d = dims_of(in);
  const Host<T> a(in);
  std::vector<T> y(static_cast<size_t>(in.x.numel()));
  std::vector<T> S(static_cast<size_t>(d.b * d.H * d.P * d.N), T(0));
  if (!a.s0.empty()) S = a.s0;
  if (chunked) {
#pragma omp parallel for collapse(2) if (d.b * d.G > 1)
    for (int64_t bi = 0; bi < d.b; ++bi)
      for (int64_t g = 0; g < d.G; ++g) chunked_group(a, d, bi, g, y, S);
  } else {
#pragma omp parallel for collapse(2) if (d.b * d.H > 1)
    for (int64_t bi = 0; bi < d.b; ++bi)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t t = 0; t < d.l; ++t) step(a, d, bi, t, h, &S[d.si(bi, h)], &y[d.xi(bi, t, h)]);
  }
  store(y_out, y);
  store(final_state, S);
}

}  // namespace

void ssd_scan_forward(const SsdScanInputs& in, const Tensor& y, const Tensor& final_state) {
  by_acc(in.x, [&](auto tag) { forward_impl<typename decltype(tag)::type>(in, y, final_state, true); });
}
void ssd_scan_sequential_forward(const SsdScanInputs& in, const Tensor& y, const Tensor& final_state) {
  by_acc(in.x, [&](auto tag) { forward_impl<typename decltype(tag)::type>(in, y, final_state, false); });
}

}  // namespace strata::kernels::cpu
