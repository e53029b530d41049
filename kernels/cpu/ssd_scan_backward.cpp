// CPU kernels/ssd_scan.h, backward: the transposed products of the chunked SSD form
// (kernels/cpu/ssd_scan.cpp). Per (batch, group): the heads' chunk boundary states by the forward's
// chunk-state recurrence, then the chunks in reverse with dS̄ (dL/dS̄ after the chunk) carried
// backwards. Per chunk and head, with e_i = exp(cs_i), r_j = exp(cs_L − cs_j), Lm = exp(segsum):
//   dM = dY·Xᵀ; dCB = dM ⊙ Lm ⊙ dt (summed over the group's heads, then dC += dCB·B, dB += dCBᵀ·C);
//   dX = Mᵀ·dY + diag(r·dt)·(B·dS̄ᵀ) + D·dY;  dB += diag(r·dt)·X·dS̄;  dC += diag(e)·dY·S̄_in;
//   dS̄_in = exp(cs_L)·dS̄ + (diag(e)·dY)ᵀ·C;  dcs from the masks (row − column sums of dM ⊙ M), the
//   inter-chunk term and ⟨dS̄, S̄_out⟩; da = reverse cumsum of dcs, ddt += A·da, dA += Σ dt·da.
// Parallel over batch × group (each task owns its group's dB/dC rows and its heads' rows; the
// group's heads are added in head order), single-threaded BLAS inside each task, dA/dD per
// (batch, head) summed over the batch in order: no value depends on the thread count or on which
// other heads run. Reference: the adjoint of Mamba-2's ssd_minimal chunked form (Dao & Gu 2024).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ssd_scan_host.h"

namespace strata::kernels::cpu {
namespace {
using namespace ssd;

// Outputs of the whole backward (dx, ddt written, dB, dC zero-initialized and accumulated: in the
// output tensors where possible), d_init and the per-(batch, head) dA/dD partials.
template <typename T>
struct Grads {
  HostOut<T> dx, ddt, dB, dC;
  std::vector<T> d_init, dA_bh, dD_bh;
};

// Scratch of one (batch, group) task.
template <typename T>
struct Work {
  std::vector<T> CB, dCB, cs, M, dM, X1, X2, Y1, dcs, kcol, zrow;
  explicit Work(const Dims& d)
      : CB(d.Q * d.Q), dCB(d.Q * d.Q), cs(d.Q), M(d.Q * d.Q), dM(d.Q * d.Q), X1(d.Q * d.P), X2(d.Q * d.P),
        Y1(d.Q * std::max(d.P, d.N)), dcs(d.Q), kcol(d.Q), zrow(d.Q) {}
};

// The boundary states S̄_0..S̄_nc [nc + 1, P, N] of head h by the forward's chunk recurrence.
template <typename T>
void boundary_states(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, Work<T>& w, std::vector<T>& bound) {
  const int64_t PN = d.P * d.N, nc = (d.l + d.Q - 1) / d.Q, g = h / d.heads_per_group();
  bound.assign(static_cast<size_t>((nc + 1) * PN), T(0));
  if (a.s0) std::copy_n(&a.s0[d.si(bi, h)], PN, bound.begin());
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t t0 = c * d.Q, L = std::min(d.Q, d.l - t0);
    std::copy_n(&bound[c * PN], PN, &bound[(c + 1) * PN]);
    chunk_cumsum(a, d, bi, h, t0, L, w.cs.data());
    weighted_x(a, d, bi, h, t0, L, w.cs.data(), w.X1.data());
    chunk_state_update(a, d, bi, g, t0, L, w.cs.data(), w.X1.data(), &bound[(c + 1) * PN]);
  }
}

// The diagonal block's masks of one head: M (as the forward), dCB += dM ⊙ Lm ⊙ dt, the explicit
// ddt terms kcol[j] = Σ_i dM·CB·Lm and dcs = row sums − column sums of Z = dM ⊙ M.
template <typename T>
void diag_masks(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, int64_t t0, int64_t L,
                Work<T>& w) {
  with_cpu_isa([&] {
    const T* dt = &a.dt[d.ti(bi, t0, h)];
    const T* cs = w.cs.data();
    std::fill_n(w.kcol.begin(), L, T(0));
    std::fill_n(w.dcs.begin(), L, T(0));
    for (int64_t i = 0; i < L; ++i) {
      const T ci = cs[i];
      const T *cb = &w.CB[i * L], *dm = &w.dM[i * L];
      T *m = &w.M[i * L], *dcb = &w.dCB[i * L], *kc = w.kcol.data(), *col = w.dcs.data();
      T* z = w.zrow.data();
#pragma omp simd
      for (int64_t j = 0; j <= i; ++j) {
        const T lm = ex(ci - cs[j]), dtj = dt[j * d.H];
        const T k = dm[j] * cb[j] * lm;
        z[j] = k * dtj;
        m[j] = cb[j] * lm * dtj;
        dcb[j] += dm[j] * lm * dtj;
        kc[j] += k;
        col[j] -= z[j];
      }
      for (int64_t j = i + 1; j < L; ++j) m[j] = T(0);
      T row = 0;  // in order (the same sum on every ISA)
      for (int64_t j = 0; j <= i; ++j) row += z[j];
      col[i] += row;
    }
  });
}

// Σ_p u[p]·v[p] in order.
template <typename T>
T dot(const T* u, const T* v, int64_t n) {
  T s = 0;
  for (int64_t k = 0; k < n; ++k) s += u[k] * v[k];
  return s;
}

// One head's chunk [t0, t0 + L) of the backward; dS [P, N]: dL/dS̄ after the chunk in, before it out.
// Adds the head's terms to the group's dB/dC rows and dCB, writes its dx/ddt rows, adds dA/dD.
template <typename T>
void chunk_head_backward(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, int64_t t0, int64_t L,
                         const T* dy, const T* S_in, const T* S_out, T* dS, Work<T>& w, Grads<T>& o) {
  const int64_t g = h / d.heads_per_group(), P = d.P, N = d.N, GN = d.G * N, HP = d.H * P;
  const int iL = int(L), iP = int(P), iN = int(N), iGN = int(GN), iHP = int(HP);
  const T *Bc = &a.B[d.bi_(bi, t0, g)], *Cc = &a.C[d.bi_(bi, t0, g)], *Xc = &a.x[d.xi(bi, t0, h)];
  const T* dYc = &dy[d.xi(bi, t0, h)];
  const T* dt = &a.dt[d.ti(bi, t0, h)];
  T* cs = w.cs.data();
  chunk_cumsum(a, d, bi, h, t0, L, cs);
  mm(false, true, iL, iL, iP, 1.0, dYc, iHP, Xc, iHP, 0.0, w.dM.data(), iL);  // dM = dY·Xᵀ
  diag_masks(a, d, bi, h, t0, L, w);
  // dX (diagonal) = Mᵀ·dY into X2; U = B·dS̄ᵀ into Y1; xw = r·dt·x into X1.
  mm(true, false, iL, iP, iL, 1.0, w.M.data(), iL, dYc, iHP, 0.0, w.X2.data(), iP);
  mm(false, true, iL, iP, iN, 1.0, Bc, iGN, dS, iN, 0.0, w.Y1.data(), iP);
  const T Dh = a.D[h], Ah = a.A[h];
  T dD = 0;
  for (int64_t j = 0; j < L; ++j) {
    const T r = ex(cs[L - 1] - cs[j]), rdt = r * dt[j * d.H];
    const T *xj = &Xc[j * HP], *dyj = &dYc[j * HP], *u = &w.Y1[j * P], *dxd = &w.X2[j * P];
    T* dxo = &o.dx[d.xi(bi, t0 + j, h)];
    T* xw = &w.X1[j * P];
    const T q = dot(xj, u, P);
    w.kcol[j] += r * q;
    w.dcs[j] -= rdt * q;
    dD += dot(dyj, xj, P);
#pragma omp simd
    for (int64_t p = 0; p < P; ++p) {
      dxo[p] = dxd[p] + rdt * u[p] + Dh * dyj[p];
      xw[p] = rdt * xj[p];
    }
  }
  T* dBc = &o.dB[d.bi_(bi, t0, g)];
  T* dCc = &o.dC[d.bi_(bi, t0, g)];
  mm(false, false, iL, iN, iP, 1.0, w.X1.data(), iP, dS, iN, 1.0, dBc, iGN);  // dB += xw·dS̄
  // Ey = diag(e)·dY into X1; dC_off = Ey·S̄_in into Y1, its dcs term, then added to dC.
  for (int64_t i = 0; i < L; ++i) {
    const T e = ex(cs[i]);
    for (int64_t p = 0; p < P; ++p) w.X1[i * P + p] = e * dYc[i * HP + p];
  }
  mm(false, false, iL, iN, iP, 1.0, w.X1.data(), iP, S_in, iN, 0.0, w.Y1.data(), iN);
  for (int64_t i = 0; i < L; ++i) {
    const T* dco = &w.Y1[i * N];
    w.dcs[i] += dot(dco, &Cc[i * GN], N);
    T* dci = &dCc[i * GN];
    for (int64_t n = 0; n < N; ++n) dci[n] += dco[n];
  }
  w.dcs[L - 1] += dot(dS, S_out, P * N);  // T = cs_L scales the whole end state
  const T decay = ex(cs[L - 1]);
  for (int64_t k = 0; k < P * N; ++k) dS[k] *= decay;
  mm(true, false, iP, iN, iL, 1.0, w.X1.data(), iP, Cc, iGN, 1.0, dS, iN);  // dS̄_in += Eyᵀ·C
  T da = 0, dA = 0;
  for (int64_t j = L - 1; j >= 0; --j) {
    da += w.dcs[j];
    o.ddt[d.ti(bi, t0 + j, h)] = w.kcol[j] + Ah * da;
    dA += dt[j * d.H] * da;
  }
  o.dA_bh[bi * d.H + h] += dA;
  o.dD_bh[bi * d.H + h] += dD;
}

// One (batch, group): boundary states of its heads, then the chunks in reverse.
template <typename T>
void group_backward(const Host<T>& a, const Dims& d, int64_t bi, int64_t g, const T* dy,
                    const T* dfinal, Grads<T>& o) {
  const int64_t hpg = d.heads_per_group(), PN = d.P * d.N, nc = (d.l + d.Q - 1) / d.Q, GN = d.G * d.N;
  Work<T> w(d);
  std::vector<std::vector<T>> bound(static_cast<size_t>(hpg)), dS(static_cast<size_t>(hpg));
  for (int64_t k = 0; k < hpg; ++k) {
    const int64_t h = g * hpg + k;
    boundary_states(a, d, bi, h, w, bound[k]);
    dS[k].assign(static_cast<size_t>(PN), T(0));
    if (dfinal) std::copy_n(&dfinal[d.si(bi, h)], PN, dS[k].begin());
  }
  for (int64_t c = nc - 1; c >= 0; --c) {
    const int64_t t0 = c * d.Q, L = std::min(d.Q, d.l - t0);
    const T *Cc = &a.C[d.bi_(bi, t0, g)], *Bc = &a.B[d.bi_(bi, t0, g)];
    mm(false, true, int(L), int(L), int(d.N), 1.0, Cc, int(GN), Bc, int(GN), 0.0, w.CB.data(), int(L));
    std::fill_n(w.dCB.begin(), L * L, T(0));
    for (int64_t k = 0; k < hpg; ++k)
      chunk_head_backward(a, d, bi, g * hpg + k, t0, L, dy, &bound[k][c * PN], &bound[k][(c + 1) * PN],
                          dS[k].data(), w, o);
    // The group's CB terms: dC += dCB·B, dB += dCBᵀ·C.
    mm(false, false, int(L), int(d.N), int(L), 1.0, w.dCB.data(), int(L), Bc, int(GN), 1.0,
       &o.dC[d.bi_(bi, t0, g)], int(GN));
    mm(true, false, int(L), int(d.N), int(L), 1.0, w.dCB.data(), int(L), Cc, int(GN), 1.0,
       &o.dB[d.bi_(bi, t0, g)], int(GN));
  }
  for (int64_t k = 0; k < hpg; ++k) std::copy_n(dS[k].begin(), PN, &o.d_init[d.si(bi, g * hpg + k)]);
}

template <typename T>
void backward_impl(const SsdScanInputs& in, const Tensor& dy_t, const Tensor& dfinal_t, const SsdScanGrads& out) {
  const Dims d = dims_of(in);
  const Host<T> a(in);
  std::vector<T> keep_dy, keep_df;
  const T *dy = host_view(dy_t, keep_dy), *dfinal = host_view(dfinal_t, keep_df);
  const size_t bh = static_cast<size_t>(d.b * d.H);
  Grads<T> o{HostOut<T>(out.dx, in.x.numel(), false),
             HostOut<T>(out.ddt, in.dt.numel(), false),
             HostOut<T>(out.dB, in.B.numel(), true),
             HostOut<T>(out.dC, in.C.numel(), true),
             std::vector<T>(static_cast<size_t>(d.b * d.H * d.P * d.N)),
             std::vector<T>(bh, T(0)),
             std::vector<T>(bh, T(0))};
  gemm_split_over_openmp();  // OpenBLAS single-threaded inside our tasks (kernels/cpu/blas.h)
#pragma omp parallel for collapse(2) if (d.b * d.G > 1)
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t g = 0; g < d.G; ++g) group_backward(a, d, bi, g, dy, dfinal, o);
  std::vector<T> dA(static_cast<size_t>(d.H), T(0)), dD(static_cast<size_t>(d.H), T(0));
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t h = 0; h < d.H; ++h) {
      dA[h] += o.dA_bh[bi * d.H + h];
      dD[h] += o.dD_bh[bi * d.H + h];
    }
  o.dx.finish();
  o.ddt.finish();
  store(out.dA, dA);
  o.dB.finish();
  o.dC.finish();
  store(out.dD, dD);
  store(out.d_initial_state, o.d_init);
}

}  // namespace

void ssd_scan_backward(const SsdScanInputs& in, const Tensor& dy, const Tensor& d_final_state,
                       const SsdScanGrads& grads) {
  by_acc(in.x, [&](auto tag) { backward_impl<typename decltype(tag)::type>(in, dy, d_final_state, grads); });
}

}  // namespace strata::kernels::cpu
