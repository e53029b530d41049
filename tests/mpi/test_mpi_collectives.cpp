// The MPI communicator's collectives (parallel/mpi_communicator.cpp) under mpirun: every
// collective × dtypes (f32, f64, bf16, i64) × even and uneven sizes, Sum/Avg/Max/Min, against
// results computed locally from the known per-rank inputs (mpi_test_helpers.h: value(rank, i)).
// Inputs are small integers, so every expected value is exact; Avg follows the documented rule
// (sum, then divide in the dtype; bf16 in f32 then rounded once; i64 truncating).
#include <algorithm>
#include <numeric>

#include "mpi_test_helpers.h"

namespace strata {
namespace {

using mpitest::rank_tensor;
using mpitest::value;
using mpitest::values;
using mpitest::world;

const DType kDTypes[] = {DType::F32, DType::F64, DType::BF16, DType::I64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

// The reduction of xs (one value per rank) as the communicator documents it for `dtype`.
double reduce_expected(const std::vector<double>& xs, ReduceOp op, DType dtype) {
  const double sum = std::accumulate(xs.begin(), xs.end(), 0.0);
  const int n = static_cast<int>(xs.size());
  switch (op) {
    case ReduceOp::Sum: return sum;
    case ReduceOp::Max: return *std::max_element(xs.begin(), xs.end());
    case ReduceOp::Min: return *std::min_element(xs.begin(), xs.end());
    case ReduceOp::Avg:
      switch (dtype) {
        case DType::F64: return sum / n;
        case DType::F32: return static_cast<float>(sum) / static_cast<float>(n);
        case DType::BF16: return static_cast<float>(bfloat16(static_cast<float>(sum) / static_cast<float>(n)));
        case DType::F16: return static_cast<float>(float16(static_cast<float>(sum) / static_cast<float>(n)));
        default: return static_cast<double>(static_cast<int64_t>(sum) / n);
      }
  }
  return 0;
}

// Element i of the reduction over all ranks of value(r, first + i).
std::vector<double> reduced(int64_t n, int64_t first, ReduceOp op, DType dtype) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> xs;
    for (int r = 0; r < world().size(); ++r) xs.push_back(value(r, first + i));
    out[i] = reduce_expected(xs, op, dtype);
  }
  return out;
}

TEST_CASE("mpi all_reduce: sum/avg/max/min × dtypes × sizes", "[mpi][np8]") {
  Communicator& comm = world();
  for (DType dtype : kDTypes) {
    for (int64_t n : {1, 7, 1000}) {
      for (ReduceOp op : kOps) {
        INFO(dtype_name(dtype) << " n=" << n << " op=" << reduce_op_name(op) << " ranks=" << comm.size());
        Tensor t = rank_tensor(comm.rank(), n, dtype).view({n});
        comm.all_reduce(t, op);
        CHECK(t.to_vector() == reduced(n, 0, op, dtype));
      }
    }
  }
  // Any shape: a 2-D tensor reduces element-wise.
  Tensor t = rank_tensor(comm.rank(), 12, DType::F32).view({3, 4});
  comm.all_reduce(t, ReduceOp::Sum);
  CHECK(t.to_vector() == reduced(12, 0, ReduceOp::Sum, DType::F32));
}

TEST_CASE("mpi all_reduce: i32, u8, bool and f16", "[mpi]") {
  Communicator& comm = world();
  Tensor i32 = Tensor::from_vector({double(comm.rank()), -3.0}, {2}, DType::I32);
  comm.all_reduce(i32, ReduceOp::Sum);
  const int n = comm.size();
  CHECK(i32.to_vector() == std::vector<double>{n * (n - 1) / 2.0, -3.0 * n});
  Tensor u8 = Tensor::from_vector({double(comm.rank() + 1)}, {1}, DType::U8);
  comm.all_reduce(u8, ReduceOp::Max);
  CHECK(u8.item() == n);
  // bool: sum and max are logical or, min logical and.
  Tensor b_or = Tensor::from_vector({comm.rank() == 1 ? 1.0 : 0.0, 0.0}, {2}, DType::Bool);
  comm.all_reduce(b_or, ReduceOp::Sum);
  CHECK(b_or.to_vector() == std::vector<double>{1, 0});
  Tensor b_and = Tensor::from_vector({comm.rank() == 1 ? 0.0 : 1.0, 1.0}, {2}, DType::Bool);
  comm.all_reduce(b_and, ReduceOp::Min);
  CHECK(b_and.to_vector() == std::vector<double>{0, 1});
  Tensor h = rank_tensor(comm.rank(), 9, DType::F16);
  comm.all_reduce(h, ReduceOp::Avg);
  CHECK(h.to_vector() == reduced(9, 0, ReduceOp::Avg, DType::F16));
}

TEST_CASE("mpi reduce_scatter: ops × dtypes", "[mpi]") {
  Communicator& comm = world();
  for (DType dtype : kDTypes) {
    for (int64_t n : {1, 5}) {
      for (ReduceOp op : kOps) {
        INFO(dtype_name(dtype) << " n=" << n << " op=" << reduce_op_name(op));
        Tensor in = rank_tensor(comm.rank(), n * comm.size(), dtype);
        Tensor out = Tensor::zeros({n}, dtype);
        comm.reduce_scatter(in, out, op);
        CHECK(out.to_vector() == reduced(n, comm.rank() * n, op, dtype));
      }
    }
  }
}

TEST_CASE("mpi all_gather: dtypes, and in place into the rank's chunk", "[mpi][np8]") {
  Communicator& comm = world();
  for (DType dtype : kDTypes) {
    for (int64_t n : {1, 6}) {
      INFO(dtype_name(dtype) << " n=" << n);
      Tensor out = Tensor::zeros({comm.size() * n}, dtype);
      comm.all_gather(rank_tensor(comm.rank(), n, dtype), out);
      std::vector<double> expected;
      for (int r = 0; r < comm.size(); ++r) {
        auto v = values(r, n);
        expected.insert(expected.end(), v.begin(), v.end());
      }
      CHECK(out.to_vector() == expected);
      // In place: the input is this rank's chunk of the output (Megatron's gather buffers).
      Tensor buffer = Tensor::zeros({comm.size() * n}, dtype);
      Tensor mine = buffer.narrow(0, comm.rank() * n, n);
      mine.copy_(rank_tensor(comm.rank(), n, dtype));
      comm.all_gather(mine, buffer);
      CHECK(buffer.to_vector() == expected);
    }
  }
}

TEST_CASE("mpi all_gather_v: uneven counts, some zero", "[mpi]") {
  Communicator& comm = world();
  std::vector<int64_t> counts(comm.size());
  for (int r = 0; r < comm.size(); ++r) counts[r] = (r * 3 + 1) % 4;  // 1, 0, 3, 2, …
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  for (DType dtype : kDTypes) {
    INFO(dtype_name(dtype));
    Tensor in = rank_tensor(comm.rank(), counts[comm.rank()], dtype);
    Tensor out = Tensor::zeros({total}, dtype);
    comm.all_gather_v(in, out, counts);
    std::vector<double> expected;
    for (int r = 0; r < comm.size(); ++r) {
      auto v = values(r, counts[r]);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    CHECK(out.to_vector() == expected);
  }
}

TEST_CASE("mpi all_to_all: chunk j of rank i lands in chunk i of rank j", "[mpi]") {
  Communicator& comm = world();
  for (DType dtype : kDTypes) {
    const int64_t n = 3;
    INFO(dtype_name(dtype));
    Tensor in = rank_tensor(comm.rank(), comm.size() * n, dtype);
    Tensor out = Tensor::zeros({comm.size() * n}, dtype);
    comm.all_to_all(in, out);
    std::vector<double> expected;
    for (int i = 0; i < comm.size(); ++i) {
      auto v = values(i, n, comm.rank() * n);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    CHECK(out.to_vector() == expected);
  }
}

TEST_CASE("mpi all_to_all_v: uneven send/receive counts (MoE dispatch)", "[mpi][np8]") {
  Communicator& comm = world();
  const int size = comm.size(), me = comm.rank();
  auto c = [](int from, int to) -> int64_t { return (from + 2 * to) % 3; };  // elements from → to
  for (DType dtype : kDTypes) {
    INFO(dtype_name(dtype));
    std::vector<int64_t> send(size), recv(size);
    for (int j = 0; j < size; ++j) send[j] = c(me, j);
    for (int i = 0; i < size; ++i) recv[i] = c(i, me);
    const int64_t send_total = std::accumulate(send.begin(), send.end(), int64_t{0});
    const int64_t recv_total = std::accumulate(recv.begin(), recv.end(), int64_t{0});
    Tensor in = rank_tensor(me, send_total + 2, dtype);  // two spare elements are not sent
    Tensor out = Tensor::full({recv_total + 1}, 99, dtype);  // the spare element stays 99
    comm.all_to_all_v(in, send, out, recv);
    std::vector<double> expected;
    for (int i = 0; i < size; ++i) {
      int64_t offset = 0;  // where rank i's block for me starts in rank i's input
      for (int j = 0; j < me; ++j) offset += c(i, j);
      auto v = values(i, c(i, me), offset);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    expected.push_back(99);
    CHECK(out.to_vector() == expected);
  }
}

TEST_CASE("mpi broadcast: from every root", "[mpi]") {
  Communicator& comm = world();
  for (DType dtype : kDTypes) {
    for (int root = 0; root < comm.size(); ++root) {
      INFO(dtype_name(dtype) << " root=" << root);
      Tensor t = rank_tensor(comm.rank(), 10, dtype).view({2, 5});
      comm.broadcast(t, root);
      CHECK(t.to_vector() == values(root, 10));
    }
  }
}

TEST_CASE("mpi bad arguments are rejected with a message before communicating", "[mpi]") {
  Communicator& comm = world();
  const int size = comm.size();
  Tensor in = Tensor::zeros({4}, DType::F32);
  Tensor wrong = Tensor::zeros({4 * size + 1}, DType::F32);
  CHECK_THROWS_WITH(comm.all_gather(in, wrong), Catch::Contains("all_gather: output has"));
  Tensor out_f64 = Tensor::zeros({4 * size}, DType::F64);
  CHECK_THROWS_WITH(comm.all_gather(in, out_f64), Catch::Contains("input is f32, output f64"));
  Tensor small = Tensor::zeros({3}, DType::F32);
  CHECK_THROWS_WITH(comm.reduce_scatter(in, small, ReduceOp::Sum), Catch::Contains("reduce_scatter: input has"));
  CHECK_THROWS_WITH(comm.all_gather_v(in, wrong, {4}), Catch::Contains("counts for"));
  std::vector<int64_t> counts(size, 4);
  counts[comm.rank()] = 5;
  CHECK_THROWS_WITH(comm.all_gather_v(in, wrong, counts), Catch::Contains("counts[" + std::to_string(comm.rank())));
  std::vector<int64_t> too_many(size, 4);
  Tensor out = Tensor::zeros({4 * size}, DType::F32);
  CHECK_THROWS_WITH(comm.all_to_all_v(in, too_many, out, too_many), Catch::Contains("send counts sum to"));
  Tensor odd = Tensor::zeros({size * 2 + 1}, DType::F32);
  CHECK_THROWS_WITH(comm.all_to_all(odd, odd), Catch::Contains("not divisible by the group size"));
  CHECK_THROWS_WITH(comm.broadcast(in, size), Catch::Contains("root " + std::to_string(size)));
  std::vector<PointToPoint> ops{PointToPoint::send(in, size)};
  CHECK_THROWS_WITH(comm.batch_send_recv(ops), Catch::Contains("peer " + std::to_string(size)));
  Tensor flags = Tensor::zeros({2}, DType::Bool);
  CHECK_THROWS_WITH(comm.all_reduce(flags, ReduceOp::Avg), Catch::Contains("avg of a bool"));
  Tensor grid = Tensor::zeros({4, 4}, DType::F32);
  Tensor column = grid.narrow(1, 0, 1);
  CHECK_THROWS_WITH(comm.all_reduce(column, ReduceOp::Sum), Catch::Contains("must be contiguous"));
  // Still usable afterwards: nothing was half-sent.
  Tensor one = Tensor::full({1}, 1, DType::F32);
  comm.all_reduce(one, ReduceOp::Sum);
  CHECK(one.item() == size);
}

TEST_CASE("mpi STRATA_CHECK_COLLECTIVES: ranks that disagree are rejected on every rank", "[mpi]") {
  setenv("STRATA_CHECK_COLLECTIVES", "1", 1);
  auto checked = world().split(0, world().rank());
  unsetenv("STRATA_CHECK_COLLECTIVES");
  const int me = checked->rank(), size = checked->size();
  // Different element counts.
  Tensor t = Tensor::zeros({me == 1 ? 5 : 4}, DType::F32);
  CHECK_THROWS_WITH(checked->all_reduce(t, ReduceOp::Sum),
                    Catch::Contains("the ranks disagree") && Catch::Contains("rank 1 called collective #1 with 5 elements"));
  // Different collectives.
  Tensor b = Tensor::zeros({4}, DType::F32);
  if (me == 0) {
    CHECK_THROWS_WITH(checked->broadcast(b, 0), Catch::Contains("broadcast on group world/split: the ranks disagree"));
  } else {
    CHECK_THROWS_WITH(checked->all_reduce(b, ReduceOp::Sum), Catch::Contains("the ranks disagree"));
  }
  // all_to_all_v: rank 0 expects 2 elements from rank 1, which sends 1.
  std::vector<int64_t> send(size, 1), recv(size, 1);
  if (me == 0) recv[1] = 2;
  Tensor in = Tensor::zeros({size}, DType::F32), out = Tensor::zeros({size + 1}, DType::F32);
  CHECK_THROWS_WITH(checked->all_to_all_v(in, send, out, recv),
                    Catch::Contains("send and receive counts disagree") &&
                        Catch::Contains(me == 0 ? "rank 1 sends 1 elements to rank 0 which expects 2" : "other ranks"));
  // Agreeing calls go through.
  Tensor ok = Tensor::full({3}, 1, DType::F32);
  checked->all_reduce(ok, ReduceOp::Sum);
  CHECK(ok.to_vector() == std::vector<double>(3, size));
}

}  // namespace
}  // namespace strata
