// A measurement, not a test (hidden tag [.bench]): MPI all_reduce (library and deterministic
// rank-ordered path) and all_gather on host f32 tensors, as bus bandwidth (NCCL-tests convention:
// all_reduce moves 2(n−1)/n of the buffer per rank, all_gather (n−1)/n) next to a local memcpy of
// the same bytes measured in the same run.
//   scripts/mpirun.sh -np 4 build/tests/strata_mpi_tests "[.bench]"
#include <chrono>
#include <cstdio>
#include <cstring>

#include "mpi_test_helpers.h"

namespace strata {
namespace {

template <typename F>
double seconds_per_call(F&& f, int iterations) {
  f();  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
}

TEST_CASE("mpi bench: all_reduce / all_gather bandwidth on host tensors", "[.bench]") {
  Communicator& comm = mpitest::world();
  auto det = comm.split(0, comm.rank());
  det->set_deterministic(true);
  const int n = comm.size();
  if (comm.rank() == 0) {
    std::printf("%-10s %12s %12s %12s %12s %12s\n", "elements", "memcpy GB/s", "allred GB/s", "det GB/s",
                "allgath GB/s", "allred/memcpy");
  }
  for (int64_t elements : {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 23}) {
    const int iterations = elements >= (1 << 20) ? 5 : 50;
    Tensor t = Tensor::full({elements}, 1.0, DType::F32);
    Tensor copy = Tensor::empty({elements}, DType::F32);
    Tensor gathered = Tensor::empty({elements * n}, DType::F32);
    const double bytes = static_cast<double>(t.nbytes());
    const double t_copy = seconds_per_call([&] { std::memcpy(copy.data_ptr(), t.data_ptr(), t.nbytes()); }, iterations);
    comm.barrier();
    const double t_ar = seconds_per_call([&] { comm.all_reduce(t, ReduceOp::Sum); }, iterations);
    comm.barrier();
    const double t_det = seconds_per_call([&] { det->all_reduce(t, ReduceOp::Sum); }, iterations);
    comm.barrier();
    const double t_ag = seconds_per_call([&] { comm.all_gather(t, gathered); }, iterations);
    if (comm.rank() == 0) {
      const double ar_bus = 2.0 * (n - 1) / n * bytes;
      const double ag_bus = (n - 1) * bytes;
      std::printf("%-10lld %12.2f %12.2f %12.2f %12.2f %12.1f\n", static_cast<long long>(elements),
                  bytes / t_copy / 1e9, ar_bus / t_ar / 1e9, ar_bus / t_det / 1e9, ag_bus / t_ag / 1e9, t_ar / t_copy);
    }
  }
}

}  // namespace
}  // namespace strata
