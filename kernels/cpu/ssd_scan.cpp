// CPU kernels/ssd_scan.h, forward: the chunked SSD form as matrix products (OpenBLAS, one call per
// product) and the token-by-token recurrence (the tests' reference). Per (batch, group) and chunk:
// CB = C·Bᵀ [Q, Q] once for the group's heads; per head: M = CB ⊙ exp(segsum a) ⊙ dt (causal),
// Y = diag(exp cs)·(C·S̄ᵀ) + M·X + D·x, and the chunk-state recurrence S̄ ← exp(cs_Q)·S̄ + (w ⊙ X)ᵀ·B
// (w_j = exp(cs_Q − cs_j)·dt_j) run chunk by chunk. Parallel over batch × group with a fixed
// partition and single-threaded BLAS inside each task, so no value depends on the thread count
// or on which other heads and groups run. The backward is kernels/cpu/ssd_scan_backward.cpp.
// Reference: Mamba-2 (Dao & Gu 2024) ssd_minimal_discrete; the recurrence
// S_t = exp(dt_t·A)·S_{t−1} + dt_t·x_t⊗B_t, y_t = S_t·C_t + D·x_t.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ssd_scan_host.h"

namespace strata::kernels::cpu {
namespace {
using namespace ssd;

// Scratch of one (batch, group) forward: the chunk's C·Bᵀ [Q, Q] (shared by the group's heads),
// and one head's cumulative decay [Q], masked products M [Q, Q], output rows [Q, P] and weighted
// x [Q, P].
template <typename T>
struct ChunkScratch {
  std::vector<T> CB, cs, M, Y, xw;
  explicit ChunkScratch(const Dims& d) : CB(d.Q * d.Q), cs(d.Q), M(d.Q * d.Q), Y(d.Q * d.P), xw(d.Q * d.P) {}
};

// M[i, j] = CB[i, j]·exp(cs_i − cs_j)·dt_j for j ≤ i, 0 above the diagonal ([L, L], ld L).
template <typename T>
void masked_products(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, int64_t t0, int64_t L,
                     const T* CB, const T* cs, T* M) {
  with_cpu_isa([&] {
    const T* dt = &a.dt[d.ti(bi, t0, h)];
    const int64_t H = d.H;
    for (int64_t i = 0; i < L; ++i) {
      const T ci = cs[i];
      const T* cb = &CB[i * L];
      T* m = &M[i * L];
#pragma omp simd
      for (int64_t j = 0; j <= i; ++j) m[j] = cb[j] * ex(ci - cs[j]) * dt[j * H];
      for (int64_t j = i + 1; j < L; ++j) m[j] = T(0);
    }
  });
}

// One head's chunk [t0, t0 + L) in the SSD matrix form: Y = diag(exp cs)·(C·Sᵀ) + M·X, y = Y + D·x,
// then the carried state S [P, N] (in: before the chunk, out: after it).
template <typename T>
void chunk_head(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, int64_t t0, int64_t L,
                ChunkScratch<T>& w, const HostOut<T>& y, T* S) {
  const int64_t g = h / d.heads_per_group(), P = d.P, N = d.N, GN = d.G * N, HP = d.H * P;
  const T* Cc = &a.C[d.bi_(bi, t0, g)];
  const T* Xc = &a.x[d.xi(bi, t0, h)];
  chunk_cumsum(a, d, bi, h, t0, L, w.cs.data());
  masked_products(a, d, bi, h, t0, L, w.CB.data(), w.cs.data(), w.M.data());
  mm(false, true, int(L), int(P), int(N), 1.0, Cc, int(GN), S, int(N), 0.0, w.Y.data(), int(P));
  with_cpu_isa([&] {
    for (int64_t i = 0; i < L; ++i) {
      const T e = ex(w.cs[i]);
      T* yr = &w.Y[i * P];
#pragma omp simd
      for (int64_t p = 0; p < P; ++p) yr[p] *= e;
    }
  });
  mm(false, false, int(L), int(P), int(L), 1.0, w.M.data(), int(L), Xc, int(HP), 1.0, w.Y.data(), int(P));
  const T Dh = a.D[h];
  with_cpu_isa([&] {
    for (int64_t i = 0; i < L; ++i) {
      const T* yr = &w.Y[i * P];
      const T* xi = &Xc[i * HP];
      T* yo = &y[d.xi(bi, t0 + i, h)];
#pragma omp simd
      for (int64_t p = 0; p < P; ++p) yo[p] = yr[p] + Dh * xi[p];
    }
  });
  weighted_x(a, d, bi, h, t0, L, w.cs.data(), w.xw.data());
  chunk_state_update(a, d, bi, g, t0, L, w.cs.data(), w.xw.data(), S);
}

// One (batch, group) by chunks: the chunk's C·Bᵀ once (one GEMM), then each of the group's heads.
template <typename T>
void chunked_group(const Host<T>& a, const Dims& d, int64_t bi, int64_t g, const HostOut<T>& y, std::vector<T>& S) {
  ChunkScratch<T> w(d);
  const int GN = int(d.G * d.N);
  for (int64_t t0 = 0; t0 < d.l; t0 += d.Q) {
    const int64_t L = std::min(d.Q, d.l - t0);
    const T* Cc = &a.C[d.bi_(bi, t0, g)];
    const T* Bc = &a.B[d.bi_(bi, t0, g)];
    mm(false, true, int(L), int(L), int(d.N), 1.0, Cc, GN, Bc, GN, 0.0, w.CB.data(), int(L));
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
  const HostOut<T> y(y_out, in.x.numel(), false);
  std::vector<T> S(static_cast<size_t>(d.b * d.H * d.P * d.N), T(0));
  if (a.s0) std::copy_n(a.s0, S.size(), S.begin());
  if (chunked) {
    gemm_split_over_openmp();  // OpenBLAS single-threaded inside our tasks (kernels/cpu/blas.h)
#pragma omp parallel for collapse(2) if (d.b * d.G > 1)
    for (int64_t bi = 0; bi < d.b; ++bi)
      for (int64_t g = 0; g < d.G; ++g) chunked_group(a, d, bi, g, y, S);
  } else {
#pragma omp parallel for collapse(2) if (d.b * d.H > 1)
    for (int64_t bi = 0; bi < d.b; ++bi)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t t = 0; t < d.l; ++t) step(a, d, bi, t, h, &S[d.si(bi, h)], &y[d.xi(bi, t, h)]);
  }
  y.finish();
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
