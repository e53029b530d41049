// Internal to the CPU SSD scan (kernels/cpu/ssd_scan.cpp, ssd_scan_backward.cpp): the scan's
// sizes and index maps, its inputs as host arrays of the accumulation type (f64 for f64 x, else
// f32), the dtype dispatch, and the attribute that builds the hot loops as AVX-512 / AVX2 /
// baseline clones (both files are built with -ffp-contract=off, CMakeLists.txt, so every clone
// computes the baseline's values). Reference: kernels/ssd_scan.h.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/host_vectors.h"
#include "kernels/ssd_scan.h"

#define STRATA_SSD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

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

// The scan's inputs in the accumulation type.
template <typename T>
struct Host {
  std::vector<T> x, dt, A, B, C, D, s0;
  explicit Host(const SsdScanInputs& in)
      : x(host<T>(in.x)), dt(host<T>(in.dt)), A(host<T>(in.A)), B(host<T>(in.B)), C(host<T>(in.C)),
        D(host<T>(in.D)), s0(host<T>(in.initial_state)) {}
};

// f(TypeTag<acc>): f64 for f64 x, else f32.
template <typename F>
void by_acc(const Tensor& x, F f) {
  if (x.dtype() == DType::F64) f(TypeTag<double>{});
  else f(TypeTag<float>{});
}

}  // namespace strata::kernels::cpu::ssd
