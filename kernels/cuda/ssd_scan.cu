// CUDA SSD scan (kernels/ssd_scan.h); CPU reference in kernels/cpu/ssd_scan.cpp. Straightforward,
// not yet fast: inputs are converted to the accumulation type (f64 for f64 x, else f32).
// Forward: one thread per (batch, head, p) runs the recurrence token by token, its state row in
// global memory (the state tensor doubles as the final state). Backward: one block per
// (batch, head): boundary states at every chunk start, then per chunk in reverse the states
// recomputed from the chunk's boundary and the recurrence's adjoint (threads over p, then over n;
// sums over p by thread 0 in index order); per-head dB/dC/dA/dD partials summed by small kernels in
// a fixed order (no atomics, deterministic).
#include "core/cuda/cuda_utils.h"
#include "kernels/ssd_scan.h"

namespace strata::kernels::cuda {
namespace {
constexpr int kThreads = 128;
__host__ __device__ inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

struct Dims {
  int64_t b, l, H, P, G, N, Q;
};
Dims dims_of(const SsdScanInputs& in) {
  return {in.x.size(0), in.x.size(1), in.x.size(2), in.x.size(3), in.B.size(2), in.B.size(3), in.chunk_size};
}

template <typename T>
struct Ptrs {
  const T *x, *dt, *A, *B, *C, *D;
};

// One token for the rows p of state S (rows p·N .. p·N+N−1); returns Σ_n S·C_t.
template <typename T>
__device__ T step_row(const Ptrs<T>& a, const Dims& d, int64_t bi, int64_t t, int64_t h, int64_t p, T* S) {
  const int64_t g = h / (d.H / d.G);
  const int64_t ti = (bi * d.l + t) * d.H + h, bn = ((bi * d.l + t) * d.G + g) * d.N;
  const T dt = a.dt[ti], decay = exp(dt * a.A[h]), xp = a.x[ti * d.P + p];
  T acc = 0;
  for (int64_t n = 0; n < d.N; ++n) {
    T s = decay * S[p * d.N + n] + dt * xp * a.B[bn + n];
    S[p * d.N + n] = s;
    acc += s * a.C[bn + n];
  }
  return acc;
}

template <typename T>
__global__ void forward_kernel(Ptrs<T> a, Dims d, T* y, T* S) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d.b * d.H * d.P) return;
  const int64_t p = i % d.P, h = (i / d.P) % d.H, bi = i / (d.P * d.H);
  T* Sh = S + (bi * d.H + h) * d.P * d.N;
  for (int64_t t = 0; t < d.l; ++t) {
    const int64_t xi = ((bi * d.l + t) * d.H + h) * d.P + p;
    y[xi] = step_row(a, d, bi, t, h, p, Sh) + a.D[h] * a.x[xi];
  }
}

struct BackwardScratch {
  void *bound, *states, *G, *dBh, *dCh, *dAbh, *dDbh;
};

// The adjoint of token t for block (bi, h); Sprev/S: states before/after it; G: dL/dS_t in, dL/dS_{t−1} out.
template <typename T>
__device__ void token_backward(const Ptrs<T>& a, const Dims& d, int64_t bi, int64_t h, int64_t t, const T* Sprev,
                               const T* S, const T* dy, T* G, T* dx, T* ddt, T* dBh, T* dCh, T* red, T& dA,
                               T& dD) {
  const int64_t g = h / (d.H / d.G), N = d.N;
  const int64_t ti = (bi * d.l + t) * d.H + h, bn = ((bi * d.l + t) * d.G + g) * N;
  const T dt = a.dt[ti], decay = exp(dt * a.A[h]);
  T d_decay = 0, ddt_part = 0, dD_part = 0;
  for (int64_t p = threadIdx.x; p < d.P; p += blockDim.x) {
    const T dyp = dy[ti * d.P + p], xp = a.x[ti * d.P + p];
    T dxp = a.D[h] * dyp;
    dD_part += dyp * xp;
    for (int64_t n = 0; n < N; ++n) {
      const T gk = G[p * N + n] + dyp * a.C[bn + n];
      G[p * N + n] = gk;
      d_decay += gk * Sprev[p * N + n];
      ddt_part += gk * xp * a.B[bn + n];
      dxp += dt * gk * a.B[bn + n];
    }
    dx[ti * d.P + p] = dxp;
  }
  red[threadIdx.x] = d_decay;
  red[blockDim.x + threadIdx.x] = ddt_part;
  red[2 * blockDim.x + threadIdx.x] = dD_part;
  __syncthreads();
  if (threadIdx.x == 0) {
    T s0 = 0, s1 = 0, s2 = 0;
    for (int i = 0; i < int(blockDim.x); ++i) s0 += red[i], s1 += red[blockDim.x + i], s2 += red[2 * blockDim.x + i];
    ddt[ti] = s1 + s0 * decay * a.A[h];
    dA += s0 * decay * dt;
    dD += s2;
  }
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    T db = 0, dc = 0;
    for (int64_t p = 0; p < d.P; ++p) {
      db += G[p * N + n] * a.x[ti * d.P + p];
      dc += S[p * N + n] * dy[ti * d.P + p];
    }
    dBh[ti * N + n] = dt * db;
    dCh[ti * N + n] = dc;
  }
  __syncthreads();
  for (int64_t k = threadIdx.x; k < d.P * N; k += blockDim.x) G[k] *= decay;
  __syncthreads();
}

template <typename T>
__global__ void backward_kernel(Ptrs<T> a, Dims d, const T* s0, const T* dy, const T* dfinal, BackwardScratch sc,
                                T* dx, T* ddt, T* d_init) {
  __shared__ T red[3 * kThreads];
  const int64_t bi = blockIdx.x / d.H, h = blockIdx.x % d.H, PN = d.P * d.N, nc = (d.l + d.Q - 1) / d.Q;
  const int64_t bh = bi * d.H + h;
  T* bound = static_cast<T*>(sc.bound) + bh * (nc + 1) * PN;
  T* St = static_cast<T*>(sc.states) + bh * (d.Q + 1) * PN;
  T* G = static_cast<T*>(sc.G) + bh * PN;
  for (int64_t k = threadIdx.x; k < PN; k += blockDim.x) {
    bound[k] = s0 ? s0[bh * PN + k] : T(0);
    G[k] = dfinal ? dfinal[bh * PN + k] : T(0);
  }
  __syncthreads();
  for (int64_t c = 0; c < nc; ++c)  // each thread owns its rows p: no synchronisation needed
    for (int64_t p = threadIdx.x; p < d.P; p += blockDim.x) {
      T* next = bound + (c + 1) * PN;
      for (int64_t n = 0; n < d.N; ++n) next[p * d.N + n] = bound[c * PN + p * d.N + n];
      for (int64_t t = c * d.Q; t < imin(d.l, (c + 1) * d.Q); ++t) step_row(a, d, bi, t, h, p, next);
    }
  __syncthreads();
  T dA = 0, dD = 0;
  for (int64_t c = nc - 1; c >= 0; --c) {
    const int64_t t0 = c * d.Q, L = imin(d.Q, d.l - t0);
    for (int64_t p = threadIdx.x; p < d.P; p += blockDim.x) {  // states inside the chunk, row p
      for (int64_t n = 0; n < d.N; ++n) St[p * d.N + n] = bound[c * PN + p * d.N + n];
      for (int64_t i = 1; i <= L; ++i) {
        for (int64_t n = 0; n < d.N; ++n) St[i * PN + p * d.N + n] = St[(i - 1) * PN + p * d.N + n];
        step_row(a, d, bi, t0 + i - 1, h, p, St + i * PN);
      }
    }
    __syncthreads();
    for (int64_t i = L - 1; i >= 0; --i)
      token_backward(a, d, bi, h, t0 + i, St + i * PN, St + (i + 1) * PN, dy, G, dx, ddt,
                     static_cast<T*>(sc.dBh), static_cast<T*>(sc.dCh), red, dA, dD);
  }
  for (int64_t k = threadIdx.x; k < PN; k += blockDim.x) d_init[bh * PN + k] = G[k];
  if (threadIdx.x == 0) {
    static_cast<T*>(sc.dAbh)[bh] = dA;
    static_cast<T*>(sc.dDbh)[bh] = dD;
  }
}

// dB[b,t,g,n] = Σ_{h in g} dBh[b,t,h,n] (heads in order); likewise dC.
template <typename T>
__global__ void group_sum_kernel(const T* per_head, T* out, Dims d) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= d.b * d.l * d.G * d.N) return;
  const int64_t n = i % d.N, g = (i / d.N) % d.G, bt = i / (d.N * d.G), hpg = d.H / d.G;
  T s = 0;
  for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) s += per_head[(bt * d.H + h) * d.N + n];
  out[i] = s;
}
template <typename T>
__global__ void batch_sum_kernel(const T* per_bh, T* out, int64_t b, int64_t H) {
  const int64_t h = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (h >= H) return;
  T s = 0;
  for (int64_t bi = 0; bi < b; ++bi) s += per_bh[bi * H + h];
  out[h] = s;
}

DType acc_dtype(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }
Tensor acc(const Tensor& t, DType dt) { return t.defined() ? t.contiguous().to(dt) : Tensor(); }
void store(const Tensor& out, const Tensor& v) {
  Tensor o = out;  // a handle on the same storage
  if (o.defined() && o.data_ptr() != v.data_ptr()) o.copy_(v);
}
template <typename T>
Ptrs<T> ptrs_of(const std::vector<Tensor>& t) {
  return {t[0].template data<T>(), t[1].template data<T>(), t[2].template data<T>(), t[3].template data<T>(), t[4].template data<T>(),
          t[5].template data<T>()};
}
template <typename T>
const T* opt_ptr(const Tensor& t) { return t.defined() ? t.template data<T>() : nullptr; }
}  // namespace

void ssd_scan_forward(const SsdScanInputs& in, const Tensor& y, const Tensor& final_state) {
  const Dims d = dims_of(in);
  const DType ad = acc_dtype(in.x);
  const Device dev = in.x.device();
  std::vector<Tensor> t = {acc(in.x, ad), acc(in.dt, ad), acc(in.A, ad), acc(in.B, ad), acc(in.C, ad), acc(in.D, ad)};
  Tensor S = in.initial_state.defined() ? in.initial_state.contiguous().to(ad).clone()
                                        : Tensor::zeros({d.b, d.H, d.P, d.N}, ad, dev);
  Tensor ya = Tensor::empty(in.x.shape(), ad, dev);
  cudaStream_t s = cuda_rt::current_stream(dev.index);
  const int64_t n = d.b * d.H * d.P;
  if (n > 0 && d.l > 0) {
    if (ad == DType::F64) {
      forward_kernel<double><<<cuda_rt::grid_for(n, kThreads), kThreads, 0, s>>>(ptrs_of<double>(t), d,
                                                                                  ya.template data<double>(),
                                                                                  S.template data<double>());
    } else {
      forward_kernel<float><<<cuda_rt::grid_for(n, kThreads), kThreads, 0, s>>>(ptrs_of<float>(t), d,
                                                                                ya.template data<float>(),
                                                                                S.template data<float>());
    }
    STRATA_CUDA_LAUNCH_CHECK();
  }
  store(y, ya);
  store(final_state, S);
}

namespace {
template <typename T>
void backward_typed(const SsdScanInputs& in, const Tensor& dy, const Tensor& dfinal, const SsdScanGrads& g,
                    DType ad) {
  const Dims d = dims_of(in);
  const Device dev = in.x.device();
  std::vector<Tensor> t = {acc(in.x, ad), acc(in.dt, ad), acc(in.A, ad), acc(in.B, ad), acc(in.C, ad), acc(in.D, ad)};
  const Tensor s0 = acc(in.initial_state, ad), dya = acc(dy, ad), dfa = acc(dfinal, ad);
  const int64_t nc = (d.l + d.Q - 1) / d.Q, PN = d.P * d.N, bh = d.b * d.H;
  Tensor bound = Tensor::empty({bh * (nc + 1) * PN}, ad, dev), states = Tensor::empty({bh * (d.Q + 1) * PN}, ad, dev);
  Tensor G = Tensor::empty({bh * PN}, ad, dev), dBh = Tensor::empty({d.b, d.l, d.H, d.N}, ad, dev);
  Tensor dCh = Tensor::empty({d.b, d.l, d.H, d.N}, ad, dev), dAbh = Tensor::empty({bh}, ad, dev);
  Tensor dDbh = Tensor::empty({bh}, ad, dev);
  Tensor dx = Tensor::empty(in.x.shape(), ad, dev), ddt = Tensor::empty(in.dt.shape(), ad, dev);
  Tensor dinit = Tensor::empty({d.b, d.H, d.P, d.N}, ad, dev), dB = Tensor::empty(in.B.shape(), ad, dev);
  Tensor dC = Tensor::empty(in.C.shape(), ad, dev), dA = Tensor::empty({d.H}, ad, dev), dD = Tensor::empty({d.H}, ad, dev);
  cudaStream_t s = cuda_rt::current_stream(dev.index);
  BackwardScratch sc{bound.data_ptr(), states.data_ptr(), G.data_ptr(), dBh.data_ptr(), dCh.data_ptr(),
                     dAbh.data_ptr(), dDbh.data_ptr()};
  backward_kernel<T><<<unsigned(bh), kThreads, 0, s>>>(ptrs_of<T>(t), d, opt_ptr<T>(s0), dya.template data<T>(),
                                                        opt_ptr<T>(dfa), sc, dx.template data<T>(), ddt.template data<T>(),
                                                        dinit.template data<T>());
  STRATA_CUDA_LAUNCH_CHECK();
  const int64_t nb = d.b * d.l * d.G * d.N;
  group_sum_kernel<T><<<cuda_rt::grid_for(nb, 256), 256, 0, s>>>(dBh.template data<T>(), dB.template data<T>(), d);
  group_sum_kernel<T><<<cuda_rt::grid_for(nb, 256), 256, 0, s>>>(dCh.template data<T>(), dC.template data<T>(), d);
  batch_sum_kernel<T><<<cuda_rt::grid_for(d.H, 256), 256, 0, s>>>(dAbh.template data<T>(), dA.template data<T>(), d.b, d.H);
  batch_sum_kernel<T><<<cuda_rt::grid_for(d.H, 256), 256, 0, s>>>(dDbh.template data<T>(), dD.template data<T>(), d.b, d.H);
  STRATA_CUDA_LAUNCH_CHECK();
  store(g.dx, dx);
  store(g.ddt, ddt);
  store(g.dA, dA);
  store(g.dB, dB);
  store(g.dC, dC);
  store(g.dD, dD);
  store(g.d_initial_state, dinit);
}
}  // namespace

void ssd_scan_backward(const SsdScanInputs& in, const Tensor& dy, const Tensor& d_final_state,
                       const SsdScanGrads& grads) {
  if (in.x.numel() == 0) return;
  if (acc_dtype(in.x) == DType::F64) backward_typed<double>(in, dy, d_final_state, grads, DType::F64);
  else backward_typed<float>(in, dy, d_final_state, grads, DType::F32);
}

}  // namespace strata::kernels::cuda
