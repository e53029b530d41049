// Under mpirun: MPI_Comm_split into row/column groups, the batched point-to-point ring exchange,
// the deterministic (rank-ordered) all_reduce/reduce_scatter bit-identical to a sequential sum and
// identical on every rank, init_distributed, and the failure paths run by ctest through
// tests/mpi/expect_abort.sh (an error on one rank aborts all; the watchdog aborts a hang).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "core/random.h"
#include "mpi_test_helpers.h"
#include "parallel/distributed.h"
#include "parallel/parallel_config.h"
#include "parallel/process_group.h"
#include "parallel/watchdog.h"

namespace strata {
namespace {

using mpitest::rank_tensor;
using mpitest::same_bits;
using mpitest::value;
using mpitest::values;
using mpitest::world;

TEST_CASE("mpi split: row and column groups of a 2-wide grid", "[mpi][np8]") {
  Communicator& comm = world();
  const int me = comm.rank(), size = comm.size();
  // Rows: ranks {0,1}, {2,3}, … ordered by rank. Columns: same parity, ordered by descending rank.
  auto row = comm.split(me / 2, me);
  auto col = comm.split(me % 2, -me);
  REQUIRE(row != nullptr);
  REQUIRE(col != nullptr);
  std::vector<int> row_members, col_members;
  for (int r = 0; r < size; ++r) {
    if (r / 2 == me / 2) row_members.push_back(r);
  }
  for (int r = size - 1; r >= 0; --r) {
    if (r % 2 == me % 2) col_members.push_back(r);
  }
  CHECK(row->size() == static_cast<int>(row_members.size()));
  CHECK(row->rank() == me % 2);
  CHECK(col->size() == static_cast<int>(col_members.size()));
  CHECK(col_members[col->rank()] == me);
  CHECK(std::string(row->backend()) == "mpi");
  // A sum over each group sees exactly its members.
  Tensor r = Tensor::full({1}, me, DType::I64);
  row->all_reduce(r, ReduceOp::Sum);
  int64_t row_sum = 0;
  for (int m : row_members) row_sum += m;
  CHECK(r.item() == row_sum);
  Tensor c = Tensor::zeros({col->size()}, DType::I64);
  col->all_gather(Tensor::full({1}, me, DType::I64), c);
  std::vector<double> expected(col_members.begin(), col_members.end());
  CHECK(c.to_vector() == expected);
  // color < 0: rank 0 joins none.
  auto rest = comm.split(me == 0 ? -1 : 0, me);
  if (me == 0) {
    CHECK(rest == nullptr);
  } else {
    REQUIRE(rest != nullptr);
    CHECK(rest->size() == size - 1);
    CHECK(rest->rank() == me - 1);
  }
  // Groups as ProcessGroups (the data the rank grid builds): routed to the MPI communicator.
  ProcessGroup tp("tp", row_members, me, row);
  Tensor t = rank_tensor(me, 4, DType::F32);
  tp.all_reduce(t, ReduceOp::Max);
  for (int64_t i = 0; i < 4; ++i) {
    double m = -1e9;
    for (int rr : row_members) m = std::max(m, value(rr, i));
    CHECK(t.to_vector()[i] == m);
  }
  CHECK(row->label() == "tp");
}

TEST_CASE("mpi batch_send_recv: ring exchange in both directions", "[mpi]") {
  Communicator& comm = world();
  const int me = comm.rank(), size = comm.size();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  Tensor to_next = rank_tensor(me, 5, DType::F32);
  Tensor to_prev = Tensor::from_vector(values(me, 3, 100), {3}, DType::I64);
  Tensor from_prev = Tensor::zeros({5}, DType::F32);
  Tensor from_next = Tensor::zeros({3}, DType::I64);
  Tensor empty = Tensor::zeros({0}, DType::F32);
  std::vector<PointToPoint> ops{PointToPoint::recv(from_prev, prev, 0), PointToPoint::recv(from_next, next, 1),
                                PointToPoint::send(to_next, next, 0), PointToPoint::send(to_prev, prev, 1),
                                PointToPoint::send(empty, next, 2), PointToPoint::recv(empty, prev, 2)};
  comm.batch_send_recv(ops);
  CHECK(from_prev.to_vector() == values(prev, 5));
  CHECK(from_next.to_vector() == values(next, 3, 100));
}

// Rank r's input for the deterministic tests: wide dynamic range so the summation order matters.
Tensor spread_input(int rank, int64_t n, DType dtype) {
  Tensor u = Tensor::empty({n}, DType::F64);
  fill_uniform(u, philox::Key{1000 + static_cast<uint64_t>(rank), 7}, -1.0, 1.0);
  std::vector<double> v = u.to_vector();
  for (int64_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], static_cast<int>((i * 7 + rank * 5) % 41) - 20);
  return Tensor::from_vector(v, {n}, dtype);
}

// Element i: ((x_0 + x_1) + x_2) + … in Acc, optionally / size, then stored in dtype.
template <typename Acc>
Tensor sequential_sum(int size, int64_t n, int64_t first, DType dtype, bool average) {
  std::vector<std::vector<double>> xs;
  for (int r = 0; r < size; ++r) {
    Tensor x = spread_input(r, first + n, dtype);
    xs.push_back(x.to_vector());
  }
  Tensor out = Tensor::empty({n}, std::is_same_v<Acc, double> ? DType::F64 : DType::F32);
  Acc* o = out.data<Acc>();
  for (int64_t i = 0; i < n; ++i) {
    Acc s = static_cast<Acc>(xs[0][first + i]);
    for (int r = 1; r < size; ++r) s += static_cast<Acc>(xs[r][first + i]);
    o[i] = average ? static_cast<Acc>(s / static_cast<Acc>(size)) : s;
  }
  return out.to(dtype);
}

TEST_CASE("mpi deterministic all_reduce/reduce_scatter: bit-identical to the rank-order sum", "[mpi][np8]") {
  auto det = world().split(0, world().rank());
  det->set_deterministic(true);
  const int me = det->rank(), size = det->size();
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    for (bool average : {false, true}) {
      INFO(dtype_name(dtype) << (average ? " avg" : " sum"));
      const int64_t n = 4099;
      Tensor t = spread_input(me, n, dtype);
      det->all_reduce(t, average ? ReduceOp::Avg : ReduceOp::Sum);
      Tensor expected = dtype == DType::F64 ? sequential_sum<double>(size, n, 0, dtype, average)
                                            : sequential_sum<float>(size, n, 0, dtype, average);
      CHECK(same_bits(t, expected));
      // Identical on every rank: gather everyone's result and compare bytes.
      Tensor all = Tensor::zeros({size * n}, dtype);
      det->all_gather(t, all);
      for (int r = 0; r < size; ++r) CHECK(same_bits(all.narrow(0, r * n, n), t));
      // reduce_scatter: rank r's chunk of the same ordered sum.
      const int64_t chunk = 37;
      Tensor in = spread_input(me, chunk * size, dtype);
      Tensor out = Tensor::zeros({chunk}, dtype);
      det->reduce_scatter(in, out, average ? ReduceOp::Avg : ReduceOp::Sum);
      Tensor rs = dtype == DType::F64 ? sequential_sum<double>(size, chunk, me * chunk, dtype, average)
                                      : sequential_sum<float>(size, chunk, me * chunk, dtype, average);
      CHECK(same_bits(out, rs));
    }
  }
  CHECK(det->split(0, 0)->deterministic());
}

TEST_CASE("mpi init_distributed: joins the mpirun job", "[mpi]") {
  ParallelConfig parallel;
  DistributedRuntime rt = init_distributed(parallel, Device::cpu());
  CHECK(rt.world_size == world().size());
  CHECK(rt.rank == world().rank());
  CHECK(rt.rank == std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  CHECK(rt.local_size == rt.world_size);  // one machine
  CHECK(rt.local_rank == rt.rank);
  CHECK(rt.uses_mpi());
  CHECK(rt.device == Device::cpu());
  CHECK(rt.world_device == nullptr);
  REQUIRE(rt.world_host != nullptr);
  CHECK(std::string(rt.world_host->backend()) == "mpi");
  Tensor t = Tensor::full({2}, rt.rank + 1, DType::F64);
  rt.world_host->all_reduce(t, ReduceOp::Sum);
  CHECK(t.to_vector() == std::vector<double>(2, rt.world_size * (rt.world_size + 1) / 2.0));
  CHECK(run_or_abort(rt, [] { return 3; }) == 3);
  CHECK_FALSE(rt.world_host->deterministic());
  DistributedRuntime det = init_distributed(parallel, Device::cpu(), /*deterministic=*/true);
  CHECK(det.world_host->deterministic());
  CHECK(det.world_host->split(0, rt.rank)->deterministic());
}

// ctest mpi_error_aborts_all_ranks: rank 1 throws; the others wait in a barrier; the job must end
// non-zero with the error and rank 1 named.
TEST_CASE("mpi abort: an error on one rank aborts all", "[.abort_on_error]") {
  DistributedRuntime rt = init_distributed(ParallelConfig{}, Device::cpu());
  run_or_abort(rt, [&] {
    if (rt.rank == 1) STRATA_THROW("injected failure on rank 1");
    rt.world_host->barrier();
    return 0;
  });
}

// ctest mpi_watchdog_timeout (STRATA_WATCHDOG_TIMEOUT_SECONDS=2): rank 1 skips the all_reduce; the
// watchdog on the other ranks must abort the job naming rank, step and collective.
TEST_CASE("mpi watchdog: a rank that skips a collective", "[.watchdog_hang]") {
  watchdog_set_step(7);
  Tensor t = Tensor::full({4}, 1, DType::F32);
  if (world().rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  } else {
    world().all_reduce(t, ReduceOp::Sum);
  }
  world().barrier();
}

}  // namespace
}  // namespace strata
