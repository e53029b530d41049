// CPU reference of kernels/ssd_scan.h: the chunked SSD forward, the sequential recurrence, the
// chunk-recomputing backward, and the causal depthwise conv1d + SiLU. Inputs are read into
// contiguous host arrays of the accumulation type (f64 for f64 x, else f32); outputs are written
// back in their own dtypes. Parallel over batch × group (a group's heads in order), so gradient
// sums never depend on the thread count. Reference: Mamba-2 ssd_minimal_discrete, the adjoint of
// the recurrence S_t = exp(dt_t·A)·S_{t−1} + dt_t·x_t⊗B_t.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ssd_scan.h"
#include "kernels/cpu/host_vectors.h"

namespace strata::kernels::cpu {
namespace {

struct Dims {
  int64_t b, l, H, P, G, N, Q;
  int64_t heads_per_group() const { return H / G; }
  int64_t xi(int64_t bi, int64_t t, int64_t h) const { return ((bi * l + t) * H + h) * P; }
  int64_t ti(int64_t bi, int64_t t, int64_t h) const { return (bi * l + t) * H + h; }
  int64_t bi_(int64_t bi, int64_t t, int64_t g) const { return ((bi * l + t) * G + g) * N; }
  int64_t si(int64_t bi, int64_t h) const { return (bi * H + h) * P * N; }
};
Dims dims_of(const SsdScanInputs& in) {
  return {in.x.size(0), in.x.size(1), in.x.size(2), in.x.size(3), in.B.size(2), in.B.size(3), in.chunk_size};
}

// The scan's inputs in the accumulation type.
template <typename T>
struct Host {
  std::vector<T> x, dt, A, B, C, D, s0;
  explicit Host(const SsdScanInputs& in)
      : x(host<T>(in.x)), dt(host<T>(in.dt)), A(host<T>(in.A)), B(host<T>(in.B)), C(host<T>(in.C)),
        D(host<T>(in.D)), s0(host<T>(in.initial_state)) {}
};

// One (batch, head) by chunks: y rows and the carried state S [P, N] (in: initial, out: final).
template <typename T>
void chunked_head(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, std::vector<T>& y, T* S) {
  const int64_t g = h / d.heads_per_group(), P = d.P, N = d.N;
  std::vector<T> cs(static_cast<size_t>(d.Q)), Sc(static_cast<size_t>(P * N));
  for (int64_t t0 = 0; t0 < d.l; t0 += d.Q) {
    const int64_t L = std::min(d.Q, d.l - t0);
    T run = 0;
    for (int64_t i = 0; i < L; ++i) cs[i] = run += a.dt[d.ti(bi, t0 + i, h)] * a.A[h];
    std::fill(Sc.begin(), Sc.end(), T(0));
    for (int64_t i = 0; i < L; ++i) {
      const T* Ci = &a.C[d.bi_(bi, t0 + i, g)];
      T* yi = &y[d.xi(bi, t0 + i, h)];
      const T off = std::exp(cs[i]);
      for (int64_t p = 0; p < P; ++p) {  // inter-chunk term and D·x
        T acc = 0;
        for (int64_t n = 0; n < N; ++n) acc += Ci[n] * S[p * N + n];
        yi[p] = off * acc + a.D[h] * a.x[d.xi(bi, t0 + i, h) + p];
      }
      for (int64_t j = 0; j <= i; ++j) {  // intra-chunk (diagonal block) term
        const T* Bj = &a.B[d.bi_(bi, t0 + j, g)];
        T cb = 0;
        for (int64_t n = 0; n < N; ++n) cb += Ci[n] * Bj[n];
        const T w = cb * std::exp(cs[i] - cs[j]) * a.dt[d.ti(bi, t0 + j, h)];
        const T* xj = &a.x[d.xi(bi, t0 + j, h)];
        for (int64_t p = 0; p < P; ++p) yi[p] += w * xj[p];
      }
    }
    for (int64_t j = 0; j < L; ++j) {  // the chunk's own end state
      const T w = std::exp(cs[L - 1] - cs[j]) * a.dt[d.ti(bi, t0 + j, h)];
      const T* Bj = &a.B[d.bi_(bi, t0 + j, g)];
      const T* xj = &a.x[d.xi(bi, t0 + j, h)];
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) Sc[p * N + n] += w * xj[p] * Bj[n];
    }
    const T decay = std::exp(cs[L - 1]);  // inter-chunk scan
    for (int64_t k = 0; k < P * N; ++k) S[k] = decay * S[k] + Sc[k];
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
#pragma omp parallel for collapse(2) if (d.b * d.H > 1)
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t h = 0; h < d.H; ++h) {
      T* Sh = &S[d.si(bi, h)];
      if (chunked) {
        chunked_head(a, d, bi, h, y, Sh);
      } else {
        for (int64_t t = 0; t < d.l; ++t) step(a, d, bi, t, h, Sh, &y[d.xi(bi, t, h)]);
      }
    }
  store(y_out, y);
  store(final_state, S);
}

// Gradients of one (batch, head), accumulated into the group's dB/dC rows and the head's dA/dD.
template <typename T>
struct HeadGrads {
  std::vector<T>& dx;
  std::vector<T>& ddt;
  std::vector<T>& dB;
  std::vector<T>& dC;
  T dA = 0, dD = 0;
};

// The adjoint of one token: G = dL/dS_t (in), dL/dS_{t−1} (out); Sprev = S_{t−1}, S = S_t.
template <typename T>
void step_backward(const Host<T>& a, const Dims& d, int64_t bi, int64_t t, int64_t h, const T* Sprev, const T* S,
                   const T* dyt, T* G, HeadGrads<T>& g_) {
  const int64_t g = h / d.heads_per_group(), P = d.P, N = d.N;
  const T dt = a.dt[d.ti(bi, t, h)], decay = std::exp(dt * a.A[h]);
  const T* Bt = &a.B[d.bi_(bi, t, g)];
  const T* Ct = &a.C[d.bi_(bi, t, g)];
  const T* xt = &a.x[d.xi(bi, t, h)];
  T* dxt = &g_.dx[d.xi(bi, t, h)];
  T* dBt = &g_.dB[d.bi_(bi, t, g)];
  T* dCt = &g_.dC[d.bi_(bi, t, g)];
  T d_decay = 0, ddt = 0;
  for (int64_t p = 0; p < P; ++p) {
    g_.dD += dyt[p] * xt[p];
    T dxp = a.D[h] * dyt[p];
    for (int64_t n = 0; n < N; ++n) {
      const int64_t k = p * N + n;
      dCt[n] += S[k] * dyt[p];
      const T gk = G[k] + dyt[p] * Ct[n];
      d_decay += gk * Sprev[k];
      ddt += gk * xt[p] * Bt[n];
      dxp += dt * gk * Bt[n];
      dBt[n] += dt * gk * xt[p];
      G[k] = decay * gk;
    }
    dxt[p] = dxp;
  }
  g_.ddt[d.ti(bi, t, h)] = ddt + d_decay * decay * a.A[h];
  g_.dA += d_decay * decay * dt;
}

// Backward of one (batch, head): boundary states by chunks, then each chunk in reverse.
template <typename T>
void head_backward(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, const std::vector<T>& dy,
                   const std::vector<T>& dfinal, std::vector<T>& d_init, HeadGrads<T>& g_) {
  const int64_t PN = d.P * d.N, nc = (d.l + d.Q - 1) / d.Q;
  std::vector<T> bound(static_cast<size_t>((nc + 1) * PN), T(0));
  if (!a.s0.empty()) std::copy_n(&a.s0[d.si(bi, h)], PN, bound.begin());
  for (int64_t c = 0; c < nc; ++c) {
    std::copy_n(&bound[c * PN], PN, &bound[(c + 1) * PN]);
    for (int64_t t = c * d.Q; t < std::min(d.l, (c + 1) * d.Q); ++t) step(a, d, bi, t, h, &bound[(c + 1) * PN], static_cast<T*>(nullptr));
  }
  std::vector<T> G(static_cast<size_t>(PN), T(0)), St(static_cast<size_t>((d.Q + 1) * PN));
  if (!dfinal.empty()) std::copy_n(&dfinal[d.si(bi, h)], PN, G.begin());
  for (int64_t c = nc - 1; c >= 0; --c) {
    const int64_t t0 = c * d.Q, L = std::min(d.Q, d.l - t0);
    std::copy_n(&bound[c * PN], PN, St.begin());
    for (int64_t i = 0; i < L; ++i) {
      std::copy_n(&St[i * PN], PN, &St[(i + 1) * PN]);
      step(a, d, bi, t0 + i, h, &St[(i + 1) * PN], static_cast<T*>(nullptr));
    }
    for (int64_t i = L - 1; i >= 0; --i)
      step_backward(a, d, bi, t0 + i, h, &St[i * PN], &St[(i + 1) * PN], &dy[d.xi(bi, t0 + i, h)], G.data(), g_);
  }
  std::copy_n(G.begin(), PN, &d_init[d.si(bi, h)]);
}

template <typename T>
void backward_impl(const SsdScanInputs& in, const Tensor& dy_t, const Tensor& dfinal_t, const SsdScanGrads& out) {
  const Dims d = dims_of(in);
  const Host<T> a(in);
  const std::vector<T> dy = host<T>(dy_t), dfinal = host<T>(dfinal_t);
  std::vector<T> dx(a.x.size()), ddt(a.dt.size()), dB(a.B.size(), T(0)), dC(a.C.size(), T(0));
  std::vector<T> d_init(static_cast<size_t>(d.b * d.H * d.P * d.N));
  std::vector<T> dA_bh(static_cast<size_t>(d.b * d.H)), dD_bh(static_cast<size_t>(d.b * d.H));
#pragma omp parallel for collapse(2) if (d.b * d.G > 1)
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t g = 0; g < d.G; ++g)
      for (int64_t h = g * d.heads_per_group(); h < (g + 1) * d.heads_per_group(); ++h) {
        HeadGrads<T> hg{dx, ddt, dB, dC};
        head_backward(a, d, bi, h, dy, dfinal, d_init, hg);
        dA_bh[bi * d.H + h] = hg.dA;
        dD_bh[bi * d.H + h] = hg.dD;
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

template <typename F>
void by_acc(const Tensor& x, F f) {
  if (x.dtype() == DType::F64) f(TypeTag<double>{});
  else f(TypeTag<float>{});
}
}  // namespace

void ssd_scan_forward(const SsdScanInputs& in, const Tensor& y, const Tensor& final_state) {
  by_acc(in.x, [&](auto tag) { forward_impl<typename decltype(tag)::type>(in, y, final_state, true); });
}
void ssd_scan_sequential_forward(const SsdScanInputs& in, const Tensor& y, const Tensor& final_state) {
  by_acc(in.x, [&](auto tag) { forward_impl<typename decltype(tag)::type>(in, y, final_state, false); });
}
void ssd_scan_backward(const SsdScanInputs& in, const Tensor& dy, const Tensor& d_final_state,
                       const SsdScanGrads& grads) {
  by_acc(in.x, [&](auto tag) { backward_impl<typename decltype(tag)::type>(in, dy, d_final_state, grads); });
}

}  // namespace strata::kernels::cpu
