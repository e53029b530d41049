// The MPI communicator (parallel/mpi_communicator.h): host tensors, every dtype, every method of
// Communicator (parallel/communicator.h).
//   dtypes: f64 MPI_DOUBLE, f32 MPI_FLOAT, i64 MPI_INT64_T, i32 MPI_INT32_T, u8 MPI_UINT8_T,
//     bool MPI_C_BOOL (sum and max are logical or, min logical and; avg is rejected); bf16/f16
//     move as MPI_UINT16_T and are reduced by converting to f32, reducing in f32 and rounding
//     once back to the 16-bit type (no per-hop rounding, unlike a user MPI_Op on 16-bit values).
//   Avg = Sum, then divide by the group size in the tensor's dtype: f64/f32 in floating point,
//     integers by C++ integer division (truncation toward zero), bf16/f16 in f32 before the one
//     rounding back.
//   Deterministic mode (floating dtypes, Sum/Avg): all_reduce gathers every rank's values
//     (MPI_Allgather, in chunks of at most 2^24 gathered elements) and sums them in rank order
//     0..n-1 in the accumulation type (f64 for f64, f32 otherwise), starting from rank 0's value;
//     reduce_scatter exchanges the chunks with MPI_Alltoall and sums rank r's chunk the same way.
//     Every rank does the same arithmetic, so the result is bit-identical on every rank and to a
//     sequential sum. Max/Min and integer sums are exact in any order and use MPI's reductions.
//   Asynchronous all_reduce / reduce_scatter (Communicator::*_async, for overlapped gradient
//     reduction): MPI_Iallreduce / MPI_Ireduce_scatter_block; in deterministic mode an ordered
//     nonblocking scheme — MPI_Iallgather / MPI_Ialltoall start at once and wait() does the
//     rank-ordered sum, so the bits equal the blocking path's. test() drives MPI progress.
//   Counts: MPI 4.1 counts and displacements are int. all_reduce, broadcast and point-to-point
//     messages above INT_MAX elements are sent in chunks; the gathers, scatters and all-to-alls
//     reject them with an error naming the collective.
// Errors: the communicator uses MPI_ERRORS_RETURN and every call is checked (STRATA_MPI_CHECK):
// an MPI error throws strata::Error (kind Comm) with the call and MPI's error string.
// Cross-rank checks (env STRATA_CHECK_COLLECTIVES=1 when the communicator is created, for
// debugging): before each collective the ranks exchange (collective, element count, dtype,
// op/root) — and for all_to_all_v each sender's count against the receiver's — and every rank
// throws naming the disagreeing ranks instead of hanging or reading garbage. Costs one small
// MPI_Allgather per collective.
// Every collective is recorded on the watchdog (parallel/watchdog.h) while it runs.
// Reference: MPI 3.1 §5 (collectives), §6.4 (MPI_Comm_split); torch.distributed MPI backend.
#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "parallel/communicator_checks.h"
#include "parallel/distributed.h"
#include "parallel/watchdog.h"

#if STRATA_WITH_MPI
#include <mpi.h>
#endif

namespace strata {

#if !STRATA_WITH_MPI

std::shared_ptr<Communicator> make_mpi_world_communicator() {
  STRATA_THROW_KIND(ErrorKind::Comm, "this strata was built without MPI (CMake STRATA_MPI=OFF or MPI not found); "
                    "multi-rank runs need an MPI build");
}

#else

namespace {

[[noreturn]] void throw_mpi_error(const char* call, int code, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  detail::throw_error(ErrorKind::Comm, file, line,
                      detail::concat(call, " failed: ", std::string(text, static_cast<size_t>(length)),
                                     " (MPI error ", code, ")"));
}

#define STRATA_MPI_CHECK(expr)                                                   \
  do {                                                                           \
    const int strata_mpi_rc_ = (expr);                                           \
    if (strata_mpi_rc_ != MPI_SUCCESS) [[unlikely]] {                            \
      throw_mpi_error(#expr, strata_mpi_rc_, __FILE__, __LINE__);                \
    }                                                                            \
  } while (0)

bool is_half(DType t) { return t == DType::BF16 || t == DType::F16; }

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F64: return MPI_DOUBLE;
    case DType::F32: return MPI_FLOAT;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;
    case DType::I64: return MPI_INT64_T;
    case DType::I32: return MPI_INT32_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::Bool: return MPI_C_BOOL;
  }
  STRATA_INTERNAL_ASSERT(false, "unknown dtype");
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DType t, const char* collective) {
  comm_checks::reduce_op(op, t, collective);
  if (t == DType::Bool) return op == ReduceOp::Min ? MPI_LAND : MPI_LOR;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

int to_int(int64_t n, const char* collective, const char* what) {
  STRATA_CHECK(n >= 0 && n <= INT_MAX, collective, ": ", what, " ", n,
               " exceeds INT_MAX (MPI counts are int); split the tensor into smaller pieces");
  return static_cast<int>(n);
}

void check_host(const Tensor& t, const char* collective, const char* name) {
  check_defined(t, collective, name);
  STRATA_CHECK(t.device().is_cpu(), collective, ": ", name, " is on ", t.device().str(),
               "; the MPI communicator carries host tensors (device tensors go through NCCL)");
  check_contiguous(t, collective, name);
}

using comm_checks::bytes;

// Divides every element by `size` in the tensor's dtype (f32 for the f32 stand-in of 16-bit types).
void divide_in_place(Tensor& t, int size) {
  dispatch_all(t.dtype(), "avg", [&](auto tag) {
    STRATA_SCALAR(tag);
    scalar_t* p = t.data<scalar_t>();
    const int64_t n = t.numel();
    if constexpr (std::is_same_v<scalar_t, bool> || std::is_same_v<scalar_t, bfloat16> ||
                  std::is_same_v<scalar_t, float16>) {
      STRATA_INTERNAL_ASSERT(false, "avg divides f64/f32/integer buffers only");
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<scalar_t>(p[i] / static_cast<scalar_t>(size));
    }
  });
}

// Rank-ordered sums: out[i] = ((x_0[i] + x_1[i]) + x_2[i]) + … over `parts` blocks of `m` values
// laid out block after block in `gathered`; Avg divides the sum by `parts`.
template <typename Acc>
void ordered_sum(const Acc* gathered, int parts, int64_t m, Acc* out, bool average) {
  for (int64_t i = 0; i < m; ++i) {
    Acc s = gathered[i];
    for (int r = 1; r < parts; ++r) s += gathered[static_cast<int64_t>(r) * m + i];
    out[i] = average ? static_cast<Acc>(s / static_cast<Acc>(parts)) : s;
  }
}

// An asynchronous MPI collective: its requests, the tensors they read or write (kept alive), and
// the local finishing work run once they complete (the ordered sum, Avg's division, a copy back).
class MpiWork final : public CommWork {
 public:
  MpiWork(const char* collective, std::string label) : collective_(collective), label_(std::move(label)) {}
  ~MpiWork() override {
    if (done_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      log::error("{} on group {}: abandoned asynchronous collective failed: {}", collective_, label_, e.what());
    }
  }
  void wait() override {
    if (done_) return;
    if (!complete_) {
      CollectiveScope scope(collective_, label_);
      if (!requests_.empty()) {
        STRATA_MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
      }
      complete_ = true;
    }
    done_ = true;  // before finish(): an exception there must not re-run it from the destructor
    if (finish_) finish_();
    keep_.clear();
  }
  bool test() override {
    if (complete_ || done_) return true;
    int flag = 0;
    if (requests_.empty()) {
      flag = 1;
    } else {
      STRATA_MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE));
    }
    complete_ = flag != 0;
    return complete_;
  }

  std::vector<MPI_Request> requests_;
  std::vector<Tensor> keep_;
  std::function<void()> finish_;

 private:
  const char* collective_;
  std::string label_;
  bool complete_ = false;
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    STRATA_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    STRATA_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    const char* check = std::getenv("STRATA_CHECK_COLLECTIVES");
    check_ = check != nullptr && std::string(check) == "1";
  }
  ~MpiCommunicator() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const char* backend() const override { return "mpi"; }
  DeviceType device_type() const override { return DeviceType::CPU; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    CollectiveScope scope("all_reduce", label_);
    check_host(t, "all_reduce", "t");
    const MPI_Op mop = mpi_op(op, t.dtype(), "all_reduce");
    agree("all_reduce", 1, t.numel(), t.dtype(), static_cast<int64_t>(op));
    if (t.numel() == 0) return;
    const bool average = op == ReduceOp::Avg;
    if (is_half(t.dtype())) {
      Tensor acc = t.to(DType::F32);
      reduce_floats(acc, op, mop);
      t.copy_(acc);
      return;
    }
    if (deterministic_ && is_floating(t.dtype()) && (op == ReduceOp::Sum || average)) {
      reduce_floats(t, op, mop);
      return;
    }
    all_reduce_raw(t, mop);
    if (average) divide_in_place(t, size_);
  }

  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    CollectiveScope scope("reduce_scatter", label_);
    check_host(input, "reduce_scatter", "input");
    check_host(output, "reduce_scatter", "output");
    comm_checks::reduce_scatter(input, output, size_);
    const MPI_Op mop = mpi_op(op, input.dtype(), "reduce_scatter");
    agree("reduce_scatter", 2, output.numel(), input.dtype(), static_cast<int64_t>(op));
    const int n = to_int(output.numel(), "reduce_scatter", "output count");
    if (n == 0) return;
    const bool average = op == ReduceOp::Avg;
    const bool ordered = deterministic_ && is_floating(input.dtype()) && (op == ReduceOp::Sum || average);
    if (is_half(input.dtype()) || ordered) {
      Tensor in = is_half(input.dtype()) ? input.to(DType::F32) : input;
      Tensor out = is_half(input.dtype()) ? Tensor::empty(output.shape(), DType::F32) : output;
      if (ordered) {
        Tensor chunks = Tensor::empty({in.numel()}, in.dtype());
        STRATA_MPI_CHECK(MPI_Alltoall(in.data_ptr(), n, mpi_type(in.dtype()), chunks.data_ptr(), n,
                                      mpi_type(in.dtype()), comm_));
        if (in.dtype() == DType::F64) {
          ordered_sum(chunks.data<double>(), size_, n, out.data<double>(), average);
        } else {
          ordered_sum(chunks.data<float>(), size_, n, out.data<float>(), average);
        }
      } else {
        STRATA_MPI_CHECK(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), n, MPI_FLOAT, mop, comm_));
        if (average) divide_in_place(out, size_);
      }
      if (out.data_ptr() != output.data_ptr()) output.copy_(out.view(output.shape()));
      return;
    }
    STRATA_MPI_CHECK(MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), n, mpi_type(input.dtype()), mop,
                                              comm_));
    if (average) divide_in_place(output, size_);
  }

  // Asynchronous all_reduce: MPI_Iallreduce in place (Avg divides in wait()); deterministic mode
  // (floating Sum/Avg): MPI_Iallgather of every rank's values, the rank-ordered sum in wait()
  // (bit-identical to the blocking path). Started synchronously instead (completed handle):
  // bf16/f16 (reduced through an f32 copy), more than INT_MAX elements, and deterministic sums
  // whose gathered values would exceed 2^26 elements (the blocking path gathers in bounded
  // chunks).
  std::unique_ptr<CommWork> all_reduce_async(Tensor& t, ReduceOp op) override {
    check_host(t, "all_reduce", "t");
    const MPI_Op mop = mpi_op(op, t.dtype(), "all_reduce");
    const bool average = op == ReduceOp::Avg;
    const bool ordered = deterministic_ && is_floating(t.dtype()) && (op == ReduceOp::Sum || average);
    const int64_t n = t.numel();
    if (n == 0 || is_half(t.dtype()) || n > INT_MAX || (ordered && n * size_ > kAsyncGatheredElements)) {
      all_reduce(t, op);
      return completed_comm_work();
    }
    agree("all_reduce_async", 8, n, t.dtype(), static_cast<int64_t>(op));
    auto work = std::make_unique<MpiWork>("all_reduce", label_);
    work->requests_.emplace_back();
    work->keep_.push_back(t);
    const MPI_Datatype type = mpi_type(t.dtype());
    if (ordered) {
      Tensor gathered = Tensor::empty({n * size_}, t.dtype());
      work->keep_.push_back(gathered);
      STRATA_MPI_CHECK(MPI_Iallgather(t.data_ptr(), static_cast<int>(n), type, gathered.data_ptr(),
                                      static_cast<int>(n), type, comm_, &work->requests_.back()));
      const int parts = size_;
      work->finish_ = [t, gathered, n, parts, average]() mutable {
        if (t.dtype() == DType::F64) {
          ordered_sum(gathered.data<double>(), parts, n, t.data<double>(), average);
        } else {
          ordered_sum(gathered.data<float>(), parts, n, t.data<float>(), average);
        }
      };
    } else {
      STRATA_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(n), type, mop, comm_,
                                      &work->requests_.back()));
      const int parts = size_;
      if (average) work->finish_ = [t, parts]() mutable { divide_in_place(t, parts); };
    }
    return work;
  }

  // Asynchronous reduce_scatter: MPI_Ireduce_scatter_block (Avg divides in wait()); deterministic
  // mode (floating Sum/Avg): MPI_Ialltoall of the chunks, the rank-ordered sum of this rank's
  // chunk in wait(). bf16/f16 start synchronously (completed handle).
  std::unique_ptr<CommWork> reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op) override {
    check_host(input, "reduce_scatter", "input");
    check_host(output, "reduce_scatter", "output");
    comm_checks::reduce_scatter(input, output, size_);
    STRATA_CHECK(!comm_checks::overlap(input, output), "reduce_scatter: input and output overlap");
    const MPI_Op mop = mpi_op(op, input.dtype(), "reduce_scatter");
    const int n = to_int(output.numel(), "reduce_scatter", "output count");
    to_int(input.numel(), "reduce_scatter", "input count");
    if (n == 0 || is_half(input.dtype())) {
      reduce_scatter(input, output, op);
      return completed_comm_work();
    }
    agree("reduce_scatter_async", 9, output.numel(), input.dtype(), static_cast<int64_t>(op));
    const bool average = op == ReduceOp::Avg;
    const bool ordered = deterministic_ && is_floating(input.dtype()) && (op == ReduceOp::Sum || average);
    auto work = std::make_unique<MpiWork>("reduce_scatter", label_);
    work->requests_.emplace_back();
    work->keep_ = {input, output};
    const MPI_Datatype type = mpi_type(input.dtype());
    const int parts = size_;
    if (ordered) {
      Tensor chunks = Tensor::empty({input.numel()}, input.dtype());
      work->keep_.push_back(chunks);
      STRATA_MPI_CHECK(MPI_Ialltoall(input.data_ptr(), n, type, chunks.data_ptr(), n, type, comm_,
                                     &work->requests_.back()));
      work->finish_ = [output, chunks, n, parts, average]() mutable {
        if (output.dtype() == DType::F64) {
          ordered_sum(chunks.data<double>(), parts, n, output.data<double>(), average);
        } else {
          ordered_sum(chunks.data<float>(), parts, n, output.data<float>(), average);
        }
      };
    } else {
      STRATA_MPI_CHECK(MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), n, type, mop, comm_,
                                                 &work->requests_.back()));
      if (average) work->finish_ = [output, parts]() mutable { divide_in_place(output, parts); };
    }
    return work;
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    CollectiveScope scope("all_gather", label_);
    check_host(input, "all_gather", "input");
    check_host(output, "all_gather", "output");
    comm_checks::all_gather(input, output, size_);
    const int n = to_int(input.numel(), "all_gather", "input count");
    to_int(output.numel(), "all_gather", "output count");
    agree("all_gather", 3, input.numel(), input.dtype(), 0);
    if (n == 0) return;
    const MPI_Datatype type = mpi_type(input.dtype());
    // Megatron gathers into a buffer whose rank-th chunk is the input: MPI_IN_PLACE.
    const bool inplace = comm_checks::at_offset(input, output, static_cast<int64_t>(rank_) * n);
    Tensor staged = inplace ? Tensor() : comm_checks::unaliased(input, output);
    STRATA_MPI_CHECK(MPI_Allgather(inplace ? MPI_IN_PLACE : staged.data_ptr(), n, type, output.data_ptr(), n, type,
                                   comm_));
  }

  void all_gather_v(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) override {
    CollectiveScope scope("all_gather_v", label_);
    check_host(input, "all_gather_v", "input");
    check_host(output, "all_gather_v", "output");
    const int64_t total = comm_checks::all_gather_v(input, output, counts, size_, rank_);
    std::vector<int> recv_counts(size_), displs(size_);
    int64_t displacement = 0;
    for (int r = 0; r < size_; ++r) {
      recv_counts[r] = to_int(counts[r], "all_gather_v", "count");
      displs[r] = to_int(displacement, "all_gather_v", "displacement");
      displacement += counts[r];
    }
    uint64_t counts_hash = 0;
    for (int64_t c : counts) counts_hash = counts_hash * 1000003u + static_cast<uint64_t>(c);
    agree("all_gather_v", 4, total, input.dtype(), static_cast<int64_t>(counts_hash >> 1));
    const MPI_Datatype type = mpi_type(input.dtype());
    Tensor staged = comm_checks::unaliased(input, output);
    STRATA_MPI_CHECK(MPI_Allgatherv(staged.data_ptr(), recv_counts[rank_], type, output.data_ptr(), recv_counts.data(),
                                    displs.data(), type, comm_));
  }

  void all_to_all(const Tensor& input, Tensor& output) override {
    CollectiveScope scope("all_to_all", label_);
    check_host(input, "all_to_all", "input");
    check_host(output, "all_to_all", "output");
    comm_checks::all_to_all(input, output, size_);
    const int n = to_int(input.numel() / size_, "all_to_all", "chunk count");
    to_int(input.numel(), "all_to_all", "input count");
    agree("all_to_all", 5, input.numel(), input.dtype(), 0);
    if (n == 0) return;
    const MPI_Datatype type = mpi_type(input.dtype());
    Tensor staged = comm_checks::unaliased(input, output);
    STRATA_MPI_CHECK(MPI_Alltoall(staged.data_ptr(), n, type, output.data_ptr(), n, type, comm_));
  }

  void all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, Tensor& output,
                    const std::vector<int64_t>& recv_counts) override {
    CollectiveScope scope("all_to_all_v", label_);
    check_host(input, "all_to_all_v", "input");
    check_host(output, "all_to_all_v", "output");
    comm_checks::all_to_all_v(input, send_counts, output, recv_counts, size_);
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    int64_t send_total = 0, recv_total = 0;
    for (int r = 0; r < size_; ++r) {
      sc[r] = to_int(send_counts[r], "all_to_all_v", "send count");
      rc[r] = to_int(recv_counts[r], "all_to_all_v", "receive count");
      sd[r] = to_int(send_total, "all_to_all_v", "send displacement");
      rd[r] = to_int(recv_total, "all_to_all_v", "receive displacement");
      send_total += send_counts[r];
      recv_total += recv_counts[r];
    }
    agree("all_to_all_v", 6, 0, input.dtype(), 0);
    if (check_) agree_exchange(send_counts, recv_counts);
    const MPI_Datatype type = mpi_type(input.dtype());
    Tensor staged = comm_checks::unaliased(input, output);
    STRATA_MPI_CHECK(MPI_Alltoallv(staged.data_ptr(), sc.data(), sd.data(), type, output.data_ptr(), rc.data(),
                                   rd.data(), type, comm_));
  }

  void broadcast(Tensor& t, int root) override {
    CollectiveScope scope("broadcast", label_);
    check_host(t, "broadcast", "t");
    comm_checks::root(root, size_, "broadcast");
    agree("broadcast", 7, t.numel(), t.dtype(), root);
    for_chunks(t, [&](char* p, int count, MPI_Datatype type) {
      STRATA_MPI_CHECK(MPI_Bcast(p, count, type, root, comm_));
    });
  }

  void batch_send_recv(std::vector<PointToPoint>& ops) override {
    CollectiveScope scope("batch_send_recv", label_);
    int* tag_ub_ptr = nullptr;
    int has_tag_ub = 0;
    STRATA_MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub_ptr, &has_tag_ub));
    const int tag_ub = has_tag_ub ? *tag_ub_ptr : 32767;
    for (const PointToPoint& op : ops) {
      const char* name = op.kind == PointToPoint::Kind::Send ? "send tensor" : "receive tensor";
      check_host(op.tensor, "batch_send_recv", name);
      STRATA_CHECK(op.peer >= 0 && op.peer < size_, "batch_send_recv: peer ", op.peer, " outside a group of ",
                   size_, " ranks");
      STRATA_CHECK(op.tag >= 0 && op.tag <= tag_ub, "batch_send_recv: tag ", op.tag, " outside [0, ", tag_ub, "]");
      to_int(op.tensor.numel(), "batch_send_recv", "message count");
    }
    std::vector<MPI_Request> requests;
    requests.reserve(ops.size());
    for (const PointToPoint& op : ops) {
      if (op.tensor.numel() == 0) continue;
      const int n = static_cast<int>(op.tensor.numel());
      requests.emplace_back();
      if (op.kind == PointToPoint::Kind::Send) {
        STRATA_MPI_CHECK(MPI_Isend(op.tensor.data_ptr(), n, mpi_type(op.tensor.dtype()), op.peer, op.tag, comm_,
                                   &requests.back()));
      } else {
        STRATA_MPI_CHECK(MPI_Irecv(op.tensor.data_ptr(), n, mpi_type(op.tensor.dtype()), op.peer, op.tag, comm_,
                                   &requests.back()));
      }
    }
    if (!requests.empty()) {
      STRATA_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
    }
  }

  void barrier() override {
    CollectiveScope scope("barrier", label_);
    STRATA_MPI_CHECK(MPI_Barrier(comm_));
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    CollectiveScope scope("split", label_);
    MPI_Comm sub = MPI_COMM_NULL;
    STRATA_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub));
    if (sub == MPI_COMM_NULL) return nullptr;
    auto c = std::make_shared<MpiCommunicator>(sub);
    c->set_deterministic(deterministic_);
    c->set_label(label_ + "/split");
    return c;
  }

 private:
  // With STRATA_CHECK_COLLECTIVES=1: every rank throws when the ranks' (collective, elements,
  // dtype, op/root/counts) differ; the message lists the ranks that differ from rank 0.
  void agree(const char* collective, int64_t code, int64_t elements, DType dtype, int64_t extra) {
    if (!check_) return;
    const int64_t mine[4] = {code, elements, static_cast<int64_t>(dtype), extra};
    std::vector<int64_t> all(4 * static_cast<size_t>(size_));
    STRATA_MPI_CHECK(MPI_Allgather(mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, comm_));
    std::string diff;
    for (int r = 1; r < size_; ++r) {
      if (std::equal(all.begin() + 4 * r, all.begin() + 4 * r + 4, all.begin())) continue;
      diff += detail::concat("; rank ", r, " called collective #", all[4 * r], " with ", all[4 * r + 1],
                             " elements of ", dtype_name(static_cast<DType>(all[4 * r + 2])), " (op/root/counts ",
                             all[4 * r + 3], ")");
    }
    STRATA_CHECK_KIND(ErrorKind::Comm, diff.empty(), collective, " on group ", label_,
                      ": the ranks disagree (STRATA_CHECK_COLLECTIVES): rank 0 called collective #", all[0], " with ",
                      all[1], " elements of ", dtype_name(static_cast<DType>(all[2])), " (op/root/counts ", all[3],
                      ")", diff);
  }

  // all_to_all_v: what each rank sends me must equal what I expect to receive from it.
  void agree_exchange(const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts) {
    std::vector<int64_t> incoming(size_);
    STRATA_MPI_CHECK(MPI_Alltoall(send_counts.data(), 1, MPI_INT64_T, incoming.data(), 1, MPI_INT64_T, comm_));
    std::string diff;
    for (int r = 0; r < size_; ++r) {
      if (incoming[r] != recv_counts[r]) {
        diff += detail::concat("; rank ", r, " sends ", incoming[r], " elements to rank ", rank_, " which expects ",
                               recv_counts[r]);
      }
    }
    int bad = diff.empty() ? 0 : 1, any = 0;
    STRATA_MPI_CHECK(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm_));
    STRATA_CHECK_KIND(ErrorKind::Comm, any == 0, "all_to_all_v on group ", label_,
                      ": send and receive counts disagree (STRATA_CHECK_COLLECTIVES)",
                      diff.empty() ? std::string("; see the other ranks' messages") : diff);
  }

  // MPI_Allreduce in place, in chunks of at most INT_MAX elements.
  void all_reduce_raw(Tensor& t, MPI_Op op) {
    for_chunks(t, [&](char* p, int count, MPI_Datatype type) {
      STRATA_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, count, type, op, comm_));
    });
  }

  // f64/f32 tensor (the f32 stand-in for 16-bit types): MPI's reduction, or in deterministic
  // mode (Sum/Avg) the rank-ordered sum of the gathered values.
  void reduce_floats(Tensor& t, ReduceOp op, MPI_Op mop) {
    const bool average = op == ReduceOp::Avg;
    if (!(deterministic_ && (op == ReduceOp::Sum || average))) {
      all_reduce_raw(t, mop);
      if (average) divide_in_place(t, size_);
      return;
    }
    if (t.dtype() == DType::F64) {
      ordered_all_reduce(t.data<double>(), t.numel(), MPI_DOUBLE, average);
    } else {
      ordered_all_reduce(t.data<float>(), t.numel(), MPI_FLOAT, average);
    }
  }

  template <typename Acc>
  void ordered_all_reduce(Acc* data, int64_t n, MPI_Datatype type, bool average) {
    constexpr int64_t kGatheredElements = int64_t{1} << 24;
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(kGatheredElements / size_, INT_MAX));
    std::vector<Acc> gathered(static_cast<size_t>(std::min(chunk, n) * size_));
    for (int64_t off = 0; off < n; off += chunk) {
      const int64_t m = std::min(chunk, n - off);
      STRATA_MPI_CHECK(MPI_Allgather(data + off, static_cast<int>(m), type, gathered.data(), static_cast<int>(m), type,
                                     comm_));
      ordered_sum(gathered.data(), size_, m, data + off, average);
    }
  }

  // Calls f(pointer, count, type) over chunks of at most INT_MAX elements.
  template <typename F>
  void for_chunks(const Tensor& t, F&& f) {
    const MPI_Datatype type = mpi_type(t.dtype());
    const int64_t n = t.numel();
    const size_t es = t.element_size();
    for (int64_t off = 0; off < n; off += INT_MAX) {
      f(bytes(t) + off * es, static_cast<int>(std::min<int64_t>(INT_MAX, n - off)), type);
    }
  }

  static constexpr int64_t kAsyncGatheredElements = int64_t{1} << 26;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  int rank_ = 0;
  bool check_ = false;  // STRATA_CHECK_COLLECTIVES=1
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_world_communicator() {
  STRATA_CHECK_KIND(ErrorKind::Comm, mpi_initialized(),
                    "the MPI communicator needs MPI initialised (init_distributed under mpirun/srun)");
  MPI_Comm world = MPI_COMM_NULL;
  STRATA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  STRATA_MPI_CHECK(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN));
  return std::make_shared<MpiCommunicator>(world);
}

#endif  // STRATA_WITH_MPI

}  // namespace strata
