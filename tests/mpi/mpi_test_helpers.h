// Shared helpers for the multi-rank tests: the world MPI communicator and per-rank inputs that
// every rank can recompute for every other rank (so expected results are computed locally); the
// relative error the layout-equivalence tests bound (max |a − b| / max |b|).
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace strata::mpitest {

// A duplicate of MPI_COMM_WORLD, created once (label "world").
inline std::shared_ptr<Communicator> world_comm() {
  static std::shared_ptr<Communicator> comm = make_mpi_world_communicator();
  return comm;
}
inline Communicator& world() { return *world_comm(); }

// Small integers in [-5, 5]: sums over ≤ 8 ranks are exact in every dtype (bf16 included).
inline double value(int rank, int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 11) - 5.0; }

inline std::vector<double> values(int rank, int64_t n, int64_t first = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, first + i);
  return v;
}

inline Tensor rank_tensor(int rank, int64_t n, DType dtype, int64_t first = 0) {
  return Tensor::from_vector(values(rank, n, first), {n}, dtype);
}

// Bitwise equality of two tensors' bytes (same dtype and numel).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

// max |a − b| / max(max |b|, floor): a tensor's error relative to its largest entry.
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-6) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, scale = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

}  // namespace strata::mpitest
