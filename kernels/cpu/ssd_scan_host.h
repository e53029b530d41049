// Internal to the CPU SSD scan (kernels/cpu/ssd_scan.cpp, ssd_scan_backward.cpp): the scan's
// sizes and index maps, its inputs as host arrays of the accumulation type (f64 for f64 x, else
// f32), the dtype dispatch, the elementwise loops run on the process's ISA path
// (kernels/cpu/cpu_isa.h; both files are built with -ffp-contract=off, CMakeLists.txt, so every
// path computes the baseline's values), exp (vmath::exp_f32 for f32, std::exp for f64) and the pieces
// the forward and the backward share: a chunk's cumulative decay and its state update
// S ← exp(cs_L)·S + (w ⊙ X)ᵀ·B (one GEMM). Reference: kernels/ssd_scan.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/host_vectors.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/ssd_scan.h"

namespace strata::kernels::cpu::ssd {

struct Dims {
  int64_t b, l, H, P, G, N, Q;
  int64_t heads_per_group() const { return H / G; }
  int64_t xi(int64_t bi, int64_t t, int64_t h) const { return ((bi * l + t) * H + h) * P; }
  int64_t ti(int64_t bi, int64_t t, int64_t h) const { return (bi * l + t) * H + h; }
  int64_t bi_(int64_t bi, int64_t t, int64_t g) const { return ((bi * l + t) * G + g) * N; }
  int64_t si(int64_t bi, int64_t h) const { return (bi * H + h) * P * N; }
};
inline Dims dims_of(const SsdScanInputs& in) {
  return {in.x.size(0), in.x.size(1), in.x.size(2), in.x.size(3), in.B.size(2), in.B.size(3), in.chunk_size};
}

// Read-only host view of a tensor in type T: its own storage when it is a contiguous CPU tensor
// of dtype T, else a converted copy kept in `keep` (nullptr for an undefined tensor).
template <typename T>
const T* host_view(const Tensor& t, std::vector<T>& keep) {
  if (!t.defined()) return nullptr;
  if (t.device().is_cpu() && t.is_contiguous() && t.dtype() == dtype_of<T>()) return t.data<T>();
  keep = host<T>(t);
  return keep.data();
}

// Host output buffer of n elements in type T: the output tensor's own storage when it is a
// contiguous CPU tensor of dtype T (outputs never overlap the inputs), else a vector copied into
// it by finish(); zero-filled when asked.
template <typename T>
struct HostOut {
  const Tensor& t;
  std::vector<T> keep;
  T* p;
  HostOut(const Tensor& out, int64_t n, bool zero) : t(out), p(nullptr) {
    if (out.defined() && out.device().is_cpu() && out.is_contiguous() && out.dtype() == dtype_of<T>() &&
        out.numel() == n) {
      p = out.data<T>();
      if (zero) std::fill_n(p, n, T(0));
    } else {
      keep.assign(static_cast<size_t>(n), T(0));
      p = keep.data();
    }
  }
  T& operator[](int64_t i) const { return p[i]; }
  void finish() const {
    if (!keep.empty()) store(t, keep);
  }
};

// The scan's inputs in the accumulation type (s0 is nullptr without an initial state).
template <typename T>
struct Host {
  std::vector<T> keep[7];
  const T *x, *dt, *A, *B, *C, *D, *s0;
  explicit Host(const SsdScanInputs& in)
      : x(host_view(in.x, keep[0])), dt(host_view(in.dt, keep[1])), A(host_view(in.A, keep[2])),
        B(host_view(in.B, keep[3])), C(host_view(in.C, keep[4])), D(host_view(in.D, keep[5])),
        s0(host_view(in.initial_state, keep[6])) {}
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;
};

// f(TypeTag<acc>): f64 for f64 x, else f32.
template <typename F>
void by_acc(const Tensor& x, F f) {
  if (x.dtype() == DType::F64) f(TypeTag<double>{});
  else f(TypeTag<float>{});
}

__attribute__((always_inline)) inline float ex(float x) { return vmath::exp_f32(x); }
__attribute__((always_inline)) inline double ex(double x) { return std::exp(x); }

// cs[i] = Σ_{k≤i} dt_{t0+k}·A_h over the chunk [t0, t0 + L) (in order).
template <typename T>
void chunk_cumsum(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, int64_t t0, int64_t L, T* cs) {
  T run = 0;
  for (int64_t i = 0; i < L; ++i) cs[i] = run += a.dt[d.ti(bi, t0 + i, h)] * a.A[h];
}

// xw[j, p] = exp(cs[L−1] − cs[j])·dt_j·x_j[p] (j < L): the tokens' weights in the chunk's end state.
template <typename T>
void weighted_x(const Host<T>& a, const Dims& d, int64_t bi, int64_t h, int64_t t0, int64_t L,
                const T* cs, T* xw) {
  with_cpu_isa([&] {
    for (int64_t j = 0; j < L; ++j) {
      const T w = ex(cs[L - 1] - cs[j]) * a.dt[d.ti(bi, t0 + j, h)];
      const T* xj = &a.x[d.xi(bi, t0 + j, h)];
      T* o = &xw[j * d.P];
#pragma omp simd
      for (int64_t p = 0; p < d.P; ++p) o[p] = w * xj[p];
    }
  });
}

// The state after the chunk: S [P, N] ← exp(cs[L−1])·S + xwᵀ·B_chunk (B rows of group g).
template <typename T>
void chunk_state_update(const Host<T>& a, const Dims& d, int64_t bi, int64_t g, int64_t t0, int64_t L, const T* cs,
                        const T* xw, T* S) {
  const T decay = ex(cs[L - 1]);
  for (int64_t k = 0; k < d.P * d.N; ++k) S[k] *= decay;
  mm(true, false, int(d.P), int(d.N), int(L), 1.0, xw, int(d.P), &a.B[d.bi_(bi, t0, g)], int(d.G * d.N), 1.0, S,
     int(d.N));
}

}  // namespace strata::kernels::cpu::ssd
