// CPU reference of kernels/ssd_scan.h, backward: per (batch, head) the chunk boundary states by
// the recurrence, then each chunk in reverse with its states recomputed from the boundary state,
// the adjoint of the recurrence token by token (G = dL/dS carried backwards). Two heads of a group
// (with one head per group: of two groups) run in lockstep, row by row, so that their sequential
// sums (d_decay and ddt over (p, n), dx_p over n, each kept in its order) interleave; a group's
// dB/dC rows still get one head's terms after the other's. Parallel over batch × (group or group
// pair), so gradient sums never depend on the thread count. Reference: the adjoint of S_t = exp(dt_t·A)·S_{t−1} + dt_t·x_t⊗B_t, y_t = S_t·C_t + D·x_t.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ssd_scan_host.h"

namespace strata::kernels::cpu {
namespace {
using namespace ssd;

// Gradients of one (batch, head), accumulated into the group's dB/dC rows and the head's dA/dD.
template <typename T>
struct HeadGrads {
  std::vector<T>& dx;
  std::vector<T>& ddt;
  std::vector<T>& dB;
  std::vector<T>& dC;
  T dA = 0, dD = 0;
};

// S_{t−1} (S0) → S_t (S; may be S0) without the output (the backward's state recomputation): the same values
// as step(), one vector loop per row.
template <typename T>
STRATA_SSD_CLONES void step_state(const Host<T>& a, const Dims& d, int64_t bi, int64_t t, int64_t h, const T* S0,
                                  T* S) {
  const int64_t g = h / d.heads_per_group(), P = d.P, N = d.N;
  const T dt = a.dt[d.ti(bi, t, h)], decay = std::exp(dt * a.A[h]);
  const T* Bt = &a.B[d.bi_(bi, t, g)];
  const T* xt = &a.x[d.xi(bi, t, h)];
  for (int64_t p = 0; p < P; ++p) {
    const T dx = dt * xt[p];
    const T* s0 = &S0[p * N];
    T* s = &S[p * N];
#pragma omp simd
    for (int64_t n = 0; n < N; ++n) s[n] = decay * s0[n] + dx * Bt[n];
  }
}

// The adjoint of one token, in two parts so that the sums of two heads can run interleaved.
// Part 1 (adjoint_rows): G = dL/dS_t (in) → dL/dS_{t−1} (out), with Sprev = S_{t−1}, S = S_t;
// adds the head's dC and dB contributions to the token's rows and dy·x to dD, and writes the
// terms of the three sums into prod [3, P, N]: gk·Sprev, gk·x_p·B_n, dt·gk·B_n (gk = G + dy_p·C_n).
template <typename T>
STRATA_SSD_CLONES void adjoint_rows(const Host<T>& a, const Dims& d, int64_t bi, int64_t t, int64_t h,
                                    const T* Sprev, const T* S, const T* dyt, T* G, HeadGrads<T>& g_, T* prod) {
  const int64_t g = h / d.heads_per_group(), P = d.P, N = d.N, PN = P * N;
  const T dt = a.dt[d.ti(bi, t, h)], decay = std::exp(dt * a.A[h]);
  const T* Bt = &a.B[d.bi_(bi, t, g)];
  const T* Ct = &a.C[d.bi_(bi, t, g)];
  const T* xt = &a.x[d.xi(bi, t, h)];
  T* dBt = &g_.dB[d.bi_(bi, t, g)];
  T* dCt = &g_.dC[d.bi_(bi, t, g)];
  for (int64_t p = 0; p < P; ++p) {
    const T dyp = dyt[p], xp = xt[p];
    g_.dD += dyp * xp;
    const T* Sp = &S[p * N];
    const T* Spp = &Sprev[p * N];
    T* Gp = &G[p * N];
    T* p1 = &prod[p * N];
    T* p2 = p1 + PN;
    T* p3 = p1 + 2 * PN;
#pragma omp simd
    for (int64_t n = 0; n < N; ++n) {
      dCt[n] += Sp[n] * dyp;
      const T gk = Gp[n] + dyp * Ct[n];
      p1[n] = gk * Spp[n];
      p2[n] = gk * xp * Bt[n];
      p3[n] = dt * gk * Bt[n];
      dBt[n] += dt * gk * xp;
      Gp[n] = decay * gk;
    }
  }
}

// Part 2 for K heads at once (their sums interleaved; each in its own order): d_decay and ddt over
// (p, n), dx_p = D·dy_p + Σ_n; then ddt_t, dx_t and dA of each head.
template <typename T, int K>
STRATA_SSD_CLONES void adjoint_sums(const Host<T>& a, const Dims& d, int64_t bi, int64_t t, const int64_t* h,
                                    const T* const* prod, const T* const* dyt, HeadGrads<T>* const* g_) {
  const int64_t P = d.P, N = d.N, PN = P * N;
  T dd[K] = {}, ddt[K] = {};
  for (int64_t p = 0; p < P; ++p) {
    T dx[K];
    for (int q = 0; q < K; ++q) dx[q] = a.D[h[q]] * dyt[q][p];
    for (int64_t n = 0; n < N; ++n)
      for (int q = 0; q < K; ++q) {
        const int64_t k = p * N + n;
        dd[q] += prod[q][k];
        ddt[q] += prod[q][PN + k];
        dx[q] += prod[q][2 * PN + k];
      }
    for (int q = 0; q < K; ++q) g_[q]->dx[d.xi(bi, t, h[q]) + p] = dx[q];
  }
  for (int q = 0; q < K; ++q) {
    const T dt = a.dt[d.ti(bi, t, h[q])], decay = std::exp(dt * a.A[h[q]]);
    g_[q]->ddt[d.ti(bi, t, h[q])] = ddt[q] + dd[q] * decay * a.A[h[q]];
    g_[q]->dA += dd[q] * decay * dt;
  }
}

// Row p of one head's adjoint at token t (see adjoint_rows): the dC and dB terms added to the
// token's rows (Defer: written to dC_row / dB_row instead, to be added after the other head's), the
// new G row and the three sums' terms of the row into r [3, N].
template <typename T, bool Defer>
__attribute__((always_inline)) inline void adjoint_row(const T* Sp, const T* Spp, T* Gp, const T* Ct, const T* Bt,
                                                       T dyp, T xp, T dt, T decay, T* dC_row, T* dB_row, T* r,
                                                       int64_t N) {
#pragma omp simd
  for (int64_t n = 0; n < N; ++n) {
    const T gk = Gp[n] + dyp * Ct[n];
    if (Defer) {
      dC_row[n] = Sp[n] * dyp;
      dB_row[n] = dt * gk * xp;
    } else {
      dC_row[n] += Sp[n] * dyp;
      dB_row[n] += dt * gk * xp;
    }
    r[n] = gk * Spp[n];
    r[N + n] = gk * xp * Bt[n];
    r[2 * N + n] = dt * gk * Bt[n];
    Gp[n] = decay * gk;
  }
}

// Two heads at token t, row by row, their six sums interleaved (each in its order); heads of one
// group: the second head's dC/dB terms kept per row and added to the token's rows after all of the
// first head's (heads of two groups write their own rows). Every value as adjoint_rows +
// adjoint_sums give. scratch: 6·N + 2·P·N.
template <typename T>
STRATA_SSD_CLONES void adjoint_pair(const Host<T>& a, const Dims& d, int64_t bi, int64_t t, const int64_t* h,
                                    const T* const* Sprev, const T* const* S, const T* const* dyt, T* const* G,
                                    HeadGrads<T>* const* g_, T* scratch) {
  const int64_t P = d.P, N = d.N;
  const T *Bt[2], *Ct[2];
  T *dBt[2], *dCt[2];
  for (int q = 0; q < 2; ++q) {
    const int64_t g = h[q] / d.heads_per_group();
    Bt[q] = &a.B[d.bi_(bi, t, g)], Ct[q] = &a.C[d.bi_(bi, t, g)];
    dBt[q] = &g_[q]->dB[d.bi_(bi, t, g)], dCt[q] = &g_[q]->dC[d.bi_(bi, t, g)];
  }
  const bool same_group = dBt[0] == dBt[1];  // else the two heads' rows are disjoint: no order to keep
  T *r0 = scratch, *r1 = scratch + 3 * N, *dC1 = scratch + 6 * N, *dB1 = dC1 + P * N;
  T dt[2], decay[2], dd[2] = {}, ddt[2] = {};
  const T* xt[2];
  for (int q = 0; q < 2; ++q) {
    dt[q] = a.dt[d.ti(bi, t, h[q])];
    decay[q] = std::exp(dt[q] * a.A[h[q]]);
    xt[q] = &a.x[d.xi(bi, t, h[q])];
  }
  for (int64_t p = 0; p < P; ++p) {
    const int64_t o = p * N;
    for (int q = 0; q < 2; ++q) g_[q]->dD += dyt[q][p] * xt[q][p];
    adjoint_row<T, false>(&S[0][o], &Sprev[0][o], &G[0][o], Ct[0], Bt[0], dyt[0][p], xt[0][p], dt[0], decay[0],
                          dCt[0], dBt[0], r0, N);
    if (same_group)
      adjoint_row<T, true>(&S[1][o], &Sprev[1][o], &G[1][o], Ct[1], Bt[1], dyt[1][p], xt[1][p], dt[1], decay[1],
                           &dC1[o], &dB1[o], r1, N);
    else
      adjoint_row<T, false>(&S[1][o], &Sprev[1][o], &G[1][o], Ct[1], Bt[1], dyt[1][p], xt[1][p], dt[1], decay[1],
                            dCt[1], dBt[1], r1, N);
    T dx0 = a.D[h[0]] * dyt[0][p], dx1 = a.D[h[1]] * dyt[1][p];
    for (int64_t n = 0; n < N; ++n) {
      dd[0] += r0[n];
      ddt[0] += r0[N + n];
      dx0 += r0[2 * N + n];
      dd[1] += r1[n];
      ddt[1] += r1[N + n];
      dx1 += r1[2 * N + n];
    }
    g_[0]->dx[d.xi(bi, t, h[0]) + p] = dx0;
    g_[1]->dx[d.xi(bi, t, h[1]) + p] = dx1;
  }
  for (int64_t p = 0; same_group && p < P; ++p) {
#pragma omp simd
    for (int64_t n = 0; n < N; ++n) {
      dCt[0][n] += dC1[p * N + n];
      dBt[0][n] += dB1[p * N + n];
    }
  }
  for (int q = 0; q < 2; ++q) {
    g_[q]->ddt[d.ti(bi, t, h[q])] = ddt[q] + dd[q] * decay[q] * a.A[h[q]];
    g_[q]->dA += dd[q] * decay[q] * dt[q];
  }
}

// One head's backward state: the boundary states of its chunks, the states inside the current
// chunk, G = dL/dS and the terms of the sums.
template <typename T>
struct HeadBackward {
  int64_t h;
  std::vector<T> bound, St, G, prod;
  HeadGrads<T> grads;
};

// The boundary states of head hb.h (by the recurrence, chunk by chunk) and G from d_final.
template <typename T>
void start_head(const Host<T>& a, const Dims& d, int64_t bi, const std::vector<T>& dfinal, HeadBackward<T>& hb) {
  const int64_t PN = d.P * d.N, nc = (d.l + d.Q - 1) / d.Q;
  hb.bound.assign(static_cast<size_t>((nc + 1) * PN), T(0));
  if (!a.s0.empty()) std::copy_n(&a.s0[d.si(bi, hb.h)], PN, hb.bound.begin());
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t t0 = c * d.Q, t1 = std::min(d.l, (c + 1) * d.Q);
    for (int64_t t = t0; t < t1; ++t)
      step_state(a, d, bi, t, hb.h, &hb.bound[(t == t0 ? c : c + 1) * PN], &hb.bound[(c + 1) * PN]);
  }
  hb.G.assign(static_cast<size_t>(PN), T(0));
  hb.St.resize(static_cast<size_t>((d.Q + 1) * PN));
  hb.prod.resize(static_cast<size_t>(3 * PN));
  if (!dfinal.empty()) std::copy_n(&dfinal[d.si(bi, hb.h)], PN, hb.G.begin());
}

// Backward of K heads of one (batch, unit) in lockstep: each chunk in reverse, its states
// recomputed from the boundary state; per token each head's rows in head order (so the group's
// dB/dC rows get their terms in the order of one head after the other), then their sums together.
template <typename T, int K>
void heads_backward(const Host<T>& a, const Dims& d, int64_t bi, const std::vector<T>& dy,
                    const std::vector<T>& dfinal, std::vector<T>& d_init, HeadBackward<T>* hb) {
  const int64_t PN = d.P * d.N, nc = (d.l + d.Q - 1) / d.Q;
  for (int q = 0; q < K; ++q) start_head(a, d, bi, dfinal, hb[q]);
  int64_t h[K];
  const T* prod[K];
  const T* dyt[K];
  HeadGrads<T>* g_[K];
  for (int q = 0; q < K; ++q) h[q] = hb[q].h, prod[q] = hb[q].prod.data(), g_[q] = &hb[q].grads;
  std::vector<T> scratch(K == 2 ? static_cast<size_t>(6 * d.N + 2 * PN) : 0);
  for (int64_t c = nc - 1; c >= 0; --c) {
    const int64_t t0 = c * d.Q, L = std::min(d.Q, d.l - t0);
    for (int q = 0; q < K; ++q) {
      std::copy_n(&hb[q].bound[c * PN], PN, hb[q].St.begin());
      for (int64_t i = 0; i < L; ++i)
        step_state(a, d, bi, t0 + i, h[q], &hb[q].St[i * PN], &hb[q].St[(i + 1) * PN]);
    }
    for (int64_t i = L - 1; i >= 0; --i) {
      const T* Sprev[K];
      const T* S[K];
      T* G[K];
      for (int q = 0; q < K; ++q) {
        dyt[q] = &dy[d.xi(bi, t0 + i, h[q])];
        Sprev[q] = &hb[q].St[i * PN], S[q] = &hb[q].St[(i + 1) * PN], G[q] = hb[q].G.data();
      }
      if constexpr (K == 2) {
        adjoint_pair(a, d, bi, t0 + i, h, Sprev, S, dyt, G, g_, scratch.data());
      } else {
        adjoint_rows(a, d, bi, t0 + i, h[0], Sprev[0], S[0], dyt[0], G[0], hb[0].grads, hb[0].prod.data());
        adjoint_sums<T, 1>(a, d, bi, t0 + i, h, prod, dyt, g_);
      }
    }
  }
  for (int q = 0; q < K; ++q) std::copy_n(hb[q].G.begin(), PN, &d_init[d.si(bi, h[q])]);
}

template <typename T>
void backward_impl(const SsdScanInputs& in, const Tensor& dy_t, const Tensor& dfinal_t, const SsdScanGrads& out) {
  const Dims d = dims_of(in);
  const Host<T> a(in);
  const std::vector<T> dy = host<T>(dy_t), dfinal = host<T>(dfinal_t);
  std::vector<T> dx(a.x.size()), ddt(a.dt.size()), dB(a.B.size(), T(0)), dC(a.C.size(), T(0));
  std::vector<T> d_init(static_cast<size_t>(d.b * d.H * d.P * d.N));
  std::vector<T> dA_bh(static_cast<size_t>(d.b * d.H)), dD_bh(static_cast<size_t>(d.b * d.H));
  // Units of work, each owning its groups' dB/dC rows: a group (its heads paired), or with one head
  // per group two groups (their heads paired).
  const int64_t hpg = d.heads_per_group(), per_unit = hpg == 1 ? 2 : hpg, units = (d.H + per_unit - 1) / per_unit;
#pragma omp parallel for collapse(2) if (d.b * units > 1)
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t u = 0; u < units; ++u)
      for (int64_t h = u * per_unit; h < std::min(d.H, (u + 1) * per_unit); h += 2) {
        const bool pair = h + 1 < std::min(d.H, (u + 1) * per_unit);
        HeadBackward<T> hb[2] = {{h, {}, {}, {}, {}, {dx, ddt, dB, dC}}, {h + 1, {}, {}, {}, {}, {dx, ddt, dB, dC}}};
        if (pair) heads_backward<T, 2>(a, d, bi, dy, dfinal, d_init, hb);
        else heads_backward<T, 1>(a, d, bi, dy, dfinal, d_init, hb);
        for (int q = 0; q < (pair ? 2 : 1); ++q) {
          dA_bh[bi * d.H + h + q] = hb[q].grads.dA;
          dD_bh[bi * d.H + h + q] = hb[q].grads.dD;
        }
      }
  std::vector<T> dA(static_cast<size_t>(d.H), T(0)), dD(static_cast<size_t>(d.H), T(0));
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t h = 0; h < d.H; ++h) {
      dA[h] += dA_bh[bi * d.H + h];
      dD[h] += dD_bh[bi * d.H + h];
    }
  store(out.dx, dx);
  store(out.ddt, ddt);
  store(out.dA, dA);
  store(out.dB, dB);
  store(out.dC, dC);
  store(out.dD, dD);
  store(out.d_initial_state, d_init);
}

}  // namespace

void ssd_scan_backward(const SsdScanInputs& in, const Tensor& dy, const Tensor& d_final_state,
                       const SsdScanGrads& grads) {
  by_acc(in.x, [&](auto tag) { backward_impl<typename decltype(tag)::type>(in, dy, d_final_state, grads); });
}

}  // namespace strata::kernels::cpu
