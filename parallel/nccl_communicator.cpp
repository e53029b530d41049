// The NCCL communicator (parallel/nccl_communicator.h): device tensors on the rank's GPU, every
// method of Communicator (parallel/communicator.h), enqueued on the current stream of the device
// (core/stream.h) like the kernels, so they are ordered with compute without host syncs.
//   all_reduce / reduce_scatter / all_gather / broadcast: ncclAllReduce, ncclReduceScatter,
//     ncclAllGather (in place when the input is the rank's chunk of the output), ncclBroadcast.
//   all_gather_v, all_to_all, all_to_all_v: grouped ncclSend/ncclRecv (ncclGroupStart/End).
//   batch_send_recv: ncclSend/ncclRecv inside one group. NCCL has no tags: between two ranks,
//     sends and receives are matched in the order they appear in `ops`.
//   barrier: a one-element ncclAllReduce followed by a stream synchronisation.
//   split: ncclCommSplit (NCCL_SPLIT_NOCOLOR for color < 0).
//   dtypes: f64, f32, bf16, f16, i64, i32, u8 natively; bool as u8 (sum and max: logical or via
//     ncclMax, min: logical and via ncclMin). Avg: ncclAvg for floating dtypes; integer Avg is
//     rejected (use Sum).
//   all_reduce_async / reduce_scatter_async: on a communication stream of the communicator that
//     first waits on an event of the current stream; wait() makes the current stream wait on the
//     communication stream's event (see the methods).
//   Deterministic mode: nccl_prepare_deterministic_env() sets NCCL_ALGO=Ring, NCCL_PROTO=Simple
//     before the communicator is created (the ring order is fixed for a fixed layout), and
//     all_reduce / reduce_scatter of floating dtypes with Sum/Avg take the rank-ordered path like
//     MPI's: the ranks' values are gathered (ncclAllGather, or grouped send/recv of the chunks)
//     and summed in rank order 0..n-1 in f32 (f64 for f64) with kernels::add, Avg then scaled by
//     1/size (kernels::scale; may differ from MPI's division by one ulp when size is not a power
//     of two), rounded once to the dtype — identical bits on every rank. all_reduce works in
//     chunks of at most 2^26 gathered elements.
// Errors: every NCCL call goes through STRATA_NCCL_CHECK (strata::Error of kind Comm with NCCL's
// error string and last-error text). The watchdog (parallel/watchdog.h) tracks each collective
// until a CUDA event recorded after it completes; on timeout abort_all runs ncclCommAbort on every
// live communicator (registered abort hooks) before MPI_Abort.
// Reference: NCCL user guide (communicator creation over MPI, group calls, point-to-point,
// ncclCommSplit, ncclCommAbort); llm.c `multi_gpu_config_init`; megatron/training/determinism.py.
#include "parallel/nccl_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "parallel/communicator_checks.h"

#if STRATA_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/cuda/cuda_check.h"
#include "core/stream.h"
#include "kernels/elementwise.h"
#include "parallel/distributed.h"
#include "parallel/watchdog.h"
#endif

namespace strata {

#if !STRATA_WITH_NCCL

std::shared_ptr<Communicator> make_nccl_communicator(Communicator&, Device device) {
  STRATA_THROW_KIND(ErrorKind::Comm, "a device communicator for ", device.str(),
                    " needs NCCL, and this strata was built without CUDA (CMake STRATA_CUDA=OFF)");
}
void nccl_prepare_deterministic_env() {}

#else

#define STRATA_NCCL_CHECK(expr)                                                                    \
  do {                                                                                             \
    const ncclResult_t strata_nccl_rc_ = (expr);                                                   \
    if (strata_nccl_rc_ != ncclSuccess) [[unlikely]] {                                             \
      const char* strata_nccl_last_ = ncclGetLastError(nullptr);                                   \
      STRATA_THROW_KIND(::strata::ErrorKind::Comm, #expr, " failed: ", ncclGetErrorString(strata_nccl_rc_), \
                        (strata_nccl_last_ && *strata_nccl_last_ ? " — " : ""),                    \
                        (strata_nccl_last_ ? strata_nccl_last_ : ""));                             \
    }                                                                                              \
  } while (0)

void nccl_prepare_deterministic_env() {
  for (auto [var, value] : {std::pair{"NCCL_ALGO", "Ring"}, std::pair{"NCCL_PROTO", "Simple"}}) {
    const char* current = std::getenv(var);
    if (current == nullptr || *current == '\0') {
      setenv(var, value, 1);
    } else {
      STRATA_CHECK_KIND(ErrorKind::Config, std::string(current) == value, "training.deterministic needs ", var, "=",
                        value, " but the environment has ", var, "=", current,
                        " (unset it or set it to ", value, ")");
    }
  }
}

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F64: return ncclFloat64;
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I64: return ncclInt64;
    case DType::I32: return ncclInt32;
    case DType::U8:
    case DType::Bool: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op, DType t, const char* collective) {
  comm_checks::reduce_op(op, t, collective);
  if (t == DType::Bool) return op == ReduceOp::Min ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Avg:
      STRATA_CHECK(is_floating(t), collective, ": avg of an integer (", dtype_name(t),
                   ") device tensor is not supported; use sum");
      return ncclAvg;
  }
  return ncclSum;
}

void check_device(const Tensor& t, Device device, const char* collective, const char* name) {
  check_defined(t, collective, name);
  STRATA_CHECK(t.device() == device, collective, ": ", name, " is on ", t.device().str(),
               "; this NCCL communicator carries tensors on ", device.str());
  check_contiguous(t, collective, name);
}

using comm_checks::bytes;
using comm_checks::unaliased;

// An asynchronous NCCL collective enqueued on the communicator's communication stream: an event
// recorded there after it; wait() makes the calling thread's current stream wait for that event
// (cudaStreamWaitEvent, no host synchronisation), then releases the tensors it kept alive — their
// memory is reused only by work ordered after the wait. test() queries the event.
class NcclWork final : public CommWork {
 public:
  NcclWork(Device device, cudaStream_t comm_stream, std::vector<Tensor> keep) : device_(device), keep_(std::move(keep)) {
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    STRATA_CUDA_CHECK(cudaEventRecord(done_, comm_stream));
  }
  ~NcclWork() override {
    if (!waited_) {
      try {
        wait();
      } catch (...) {
      }
    }
    if (done_ != nullptr) cudaEventDestroy(done_);
  }
  void wait() override {
    if (waited_) return;
    STRATA_CUDA_CHECK(cudaSetDevice(device_.index));
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(Stream::current(device_).handle()), done_, 0));
    waited_ = true;
    keep_.clear();
  }
  bool test() override {
    if (waited_) return true;
    const cudaError_t rc = cudaEventQuery(done_);
    if (rc == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    STRATA_CUDA_CHECK(rc);
    return true;
  }

 private:
  Device device_;
  cudaEvent_t done_ = nullptr;
  std::vector<Tensor> keep_;
  bool waited_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, Device device) : comm_(comm), device_(device) {
    STRATA_NCCL_CHECK(ncclCommCount(comm_, &size_));
    STRATA_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    abort_hook_ = add_abort_hook([comm = comm_] { ncclCommAbort(comm); });
  }
  ~NcclCommunicator() override {
    remove_abort_hook(abort_hook_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const char* backend() const override { return "nccl"; }
  DeviceType device_type() const override { return DeviceType::CUDA; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    check_device(t, device_, "all_reduce", "t");
    const ncclRedOp_t nop = nccl_op(op, t.dtype(), "all_reduce");
    if (t.numel() == 0) return;
    Enqueue q(*this, "all_reduce");
    if (deterministic_ && is_floating(t.dtype()) && (op == ReduceOp::Sum || op == ReduceOp::Avg)) {
      // In chunks of at most 2^26 gathered elements, so the gather buffer stays bounded.
      const int64_t n = t.numel();
      const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 26) / size_);
      Tensor flat = t.flatten();
      Tensor gathered = Tensor::empty({size_ * std::min(chunk, n)}, t.dtype(), device_);
      for (int64_t off = 0; off < n; off += chunk) {
        const int64_t m = std::min(chunk, n - off);
        Tensor part = flat.narrow(0, off, m);
        Tensor dest = gathered.narrow(0, 0, size_ * m);
        STRATA_NCCL_CHECK(ncclAllGather(part.data_ptr(), dest.data_ptr(), m, nccl_type(t.dtype()), comm_, q.stream));
        ordered_sum(dest, m, op == ReduceOp::Avg, part);
      }
      return;
    }
    STRATA_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), nop, comm_, q.stream));
  }

  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    check_device(input, device_, "reduce_scatter", "input");
    check_device(output, device_, "reduce_scatter", "output");
    comm_checks::reduce_scatter(input, output, size_);
    const ncclRedOp_t nop = nccl_op(op, input.dtype(), "reduce_scatter");
    const size_t n = static_cast<size_t>(output.numel());
    if (n == 0) return;
    Enqueue q(*this, "reduce_scatter");
    if (deterministic_ && is_floating(input.dtype()) && (op == ReduceOp::Sum || op == ReduceOp::Avg)) {
      // Chunk `rank_` of every rank's input, in rank order.
      Tensor chunks = Tensor::empty({input.numel()}, input.dtype(), device_);
      const size_t es = input.element_size();
      STRATA_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size_; ++r) {
        STRATA_NCCL_CHECK(ncclSend(bytes(input) + r * n * es, n, nccl_type(input.dtype()), r, comm_, q.stream));
        STRATA_NCCL_CHECK(ncclRecv(bytes(chunks) + r * n * es, n, nccl_type(input.dtype()), r, comm_, q.stream));
      }
      STRATA_NCCL_CHECK(ncclGroupEnd());
      ordered_sum(chunks, static_cast<int64_t>(n), op == ReduceOp::Avg, output);
      return;
    }
    STRATA_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), n, nccl_type(input.dtype()), nop, comm_,
                                        q.stream));
  }

  // Asynchronous all_reduce / reduce_scatter (Megatron overlap_grad_reduce with
  // CUDA_DEVICE_MAX_CONNECTIONS=1): the communication stream first waits on an event recorded on
  // the current (compute) stream, so the collective reads the gradients the kernels enqueued so
  // far wrote; the collective runs there while later kernels run on the compute stream; wait()
  // orders the compute stream after it. Deterministic mode's rank-ordered sums (gather + ordered
  // kernels) are enqueued on the current stream instead (ordered, not overlapped; completed handle).
  std::unique_ptr<CommWork> all_reduce_async(Tensor& t, ReduceOp op) override {
    check_device(t, device_, "all_reduce", "t");
    const ncclRedOp_t nop = nccl_op(op, t.dtype(), "all_reduce");
    if (t.numel() == 0 || ordered(t.dtype(), op)) {
      all_reduce(t, op);
      return completed_comm_work();
    }
    cudaStream_t comm = enter_comm_stream();
    StreamGuard guard(comm_stream_);
    {
      Enqueue q(*this, "all_reduce_async");
      STRATA_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), nop, comm_, q.stream));
    }
    return std::make_unique<NcclWork>(device_, comm, std::vector<Tensor>{t});
  }

  std::unique_ptr<CommWork> reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op) override {
    check_device(input, device_, "reduce_scatter", "input");
    check_device(output, device_, "reduce_scatter", "output");
    comm_checks::reduce_scatter(input, output, size_);
    const ncclRedOp_t nop = nccl_op(op, input.dtype(), "reduce_scatter");
    if (output.numel() == 0 || ordered(input.dtype(), op)) {
      reduce_scatter(input, output, op);
      return completed_comm_work();
    }
    cudaStream_t comm = enter_comm_stream();
    StreamGuard guard(comm_stream_);
    {
      Enqueue q(*this, "reduce_scatter_async");
      STRATA_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                                          nccl_type(input.dtype()), nop, comm_, q.stream));
    }
    return std::make_unique<NcclWork>(device_, comm, std::vector<Tensor>{input, output});
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    check_device(input, device_, "all_gather", "input");
    check_device(output, device_, "all_gather", "output");
    comm_checks::all_gather(input, output, size_);
    if (input.numel() == 0) return;
    Tensor send = unaliased(input, output, static_cast<int64_t>(rank_) * input.numel());
    Enqueue q(*this, "all_gather");
    STRATA_NCCL_CHECK(ncclAllGather(send.data_ptr(), output.data_ptr(), input.numel(), nccl_type(input.dtype()), comm_,
                                    q.stream));
  }

  void all_gather_v(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) override {
    check_device(input, device_, "all_gather_v", "input");
    check_device(output, device_, "all_gather_v", "output");
    comm_checks::all_gather_v(input, output, counts, size_, rank_);
    Tensor send = unaliased(input, output, -1);
    const size_t es = input.element_size();
    Enqueue q(*this, "all_gather_v");
    STRATA_NCCL_CHECK(ncclGroupStart());
    int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      if (input.numel() > 0) {
        STRATA_NCCL_CHECK(ncclSend(send.data_ptr(), input.numel(), nccl_type(input.dtype()), r, comm_, q.stream));
      }
      if (counts[r] > 0) {
        STRATA_NCCL_CHECK(ncclRecv(bytes(output) + offset * es, counts[r], nccl_type(input.dtype()), r, comm_, q.stream));
      }
      offset += counts[r];
    }
    STRATA_NCCL_CHECK(ncclGroupEnd());
  }

  void all_to_all(const Tensor& input, Tensor& output) override {
    check_device(input, device_, "all_to_all", "input");
    check_device(output, device_, "all_to_all", "output");
    comm_checks::all_to_all(input, output, size_);
    const int64_t n = input.numel() / size_;
    std::vector<int64_t> counts(size_, n);
    exchange(input, counts, output, counts, "all_to_all");
  }

  void all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, Tensor& output,
                    const std::vector<int64_t>& recv_counts) override {
    check_device(input, device_, "all_to_all_v", "input");
    check_device(output, device_, "all_to_all_v", "output");
    comm_checks::all_to_all_v(input, send_counts, output, recv_counts, size_);
    exchange(input, send_counts, output, recv_counts, "all_to_all_v");
  }

  void broadcast(Tensor& t, int root) override {
    check_device(t, device_, "broadcast", "t");
    comm_checks::root(root, size_, "broadcast");
    if (t.numel() == 0) return;
    Enqueue q(*this, "broadcast");
    STRATA_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.dtype()), root, comm_, q.stream));
  }

  void batch_send_recv(std::vector<PointToPoint>& ops) override {
    for (const PointToPoint& op : ops) {
      check_device(op.tensor, device_, "batch_send_recv", op.kind == PointToPoint::Kind::Send ? "send tensor" : "receive tensor");
      STRATA_CHECK(op.peer >= 0 && op.peer < size_, "batch_send_recv: peer ", op.peer, " outside a group of ",
                   size_, " ranks");
    }
    Enqueue q(*this, "batch_send_recv");
    STRATA_NCCL_CHECK(ncclGroupStart());
    for (const PointToPoint& op : ops) {
      if (op.tensor.numel() == 0) continue;
      if (op.kind == PointToPoint::Kind::Send) {
        STRATA_NCCL_CHECK(ncclSend(op.tensor.data_ptr(), op.tensor.numel(), nccl_type(op.tensor.dtype()), op.peer,
                                   comm_, q.stream));
      } else {
        STRATA_NCCL_CHECK(ncclRecv(op.tensor.data_ptr(), op.tensor.numel(), nccl_type(op.tensor.dtype()), op.peer,
                                   comm_, q.stream));
      }
    }
    STRATA_NCCL_CHECK(ncclGroupEnd());
  }

  void barrier() override {
    Tensor one = Tensor::zeros({1}, DType::F32, device_);
    {
      Enqueue q(*this, "barrier");
      STRATA_NCCL_CHECK(ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, comm_, q.stream));
    }
    Stream::current(device_).synchronize();
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    STRATA_CUDA_CHECK(cudaSetDevice(device_.index));
    ncclComm_t sub = nullptr;
    STRATA_NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr));
    if (sub == nullptr) return nullptr;
    auto c = std::make_shared<NcclCommunicator>(sub, device_);
    c->set_deterministic(deterministic_);
    c->set_label(label_ + "/split");
    return c;
  }

 private:
  // Sets the device, names the stream, and after the enqueued work records an event that the
  // watchdog polls until the collective has run.
  struct Enqueue {
    Enqueue(NcclCommunicator& c, const char* collective) : self(c), name(collective) {
      STRATA_CUDA_CHECK(cudaSetDevice(c.device_.index));
      stream = static_cast<cudaStream_t>(Stream::current(c.device_).handle());
    }
    ~Enqueue() {
      auto watchdog = active_watchdog();
      if (!watchdog || std::uncaught_exceptions() > 0) return;
      cudaEvent_t event = nullptr;
      if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) return;
      if (cudaEventRecord(event, stream) != cudaSuccess) {
        cudaEventDestroy(event);
        return;
      }
      auto owned = std::shared_ptr<CUevent_st>(event, [](cudaEvent_t e) { cudaEventDestroy(e); });
      watchdog->begin(name, self.label_, [owned] { return cudaEventQuery(owned.get()) != cudaErrorNotReady; });
    }
    NcclCommunicator& self;
    const char* name;
    cudaStream_t stream = nullptr;
  };

  // Rank-ordered sum of `parts` = size_ blocks of m values (gathered: [size·m]) into out ([m]):
  // ((x_0 + x_1) + x_2) + … in f32 (f64 for f64), then /size for Avg (scale by 1/size), then
  // rounded once to out's dtype.
  void ordered_sum(const Tensor& gathered, int64_t m, bool average, Tensor& out) {
    const DType acc_type = gathered.dtype() == DType::F64 ? DType::F64 : DType::F32;
    Tensor acc = gathered.narrow(0, 0, m).to(acc_type).clone();
    for (int r = 1; r < size_; ++r) {
      Tensor part = gathered.narrow(0, r * m, m).to(acc_type);
      kernels::add(acc, part, acc);
    }
    if (average) kernels::scale(acc, 1.0 / size_, acc);
    out.view({m}).copy_(acc);
  }

  // Grouped send/recv: send_counts[j] elements to rank j (from input in rank order),
  // recv_counts[i] from rank i (into output in rank order).
  void exchange(const Tensor& input, const std::vector<int64_t>& send_counts, Tensor& output,
                const std::vector<int64_t>& recv_counts, const char* collective) {
    Tensor send = unaliased(input, output, -1);
    const size_t es = input.element_size();
    const ncclDataType_t type = nccl_type(input.dtype());
    Enqueue q(*this, collective);
    STRATA_NCCL_CHECK(ncclGroupStart());
    int64_t send_off = 0, recv_off = 0;
    for (int r = 0; r < size_; ++r) {
      if (send_counts[r] > 0) STRATA_NCCL_CHECK(ncclSend(bytes(send) + send_off * es, send_counts[r], type, r, comm_, q.stream));
      if (recv_counts[r] > 0) STRATA_NCCL_CHECK(ncclRecv(bytes(output) + recv_off * es, recv_counts[r], type, r, comm_, q.stream));
      send_off += send_counts[r];
      recv_off += recv_counts[r];
    }
    STRATA_NCCL_CHECK(ncclGroupEnd());
  }

  bool ordered(DType t, ReduceOp op) const {
    return deterministic_ && is_floating(t) && (op == ReduceOp::Sum || op == ReduceOp::Avg);
  }

  // The communication stream (created on first use), made to wait for the work enqueued so far on
  // the current stream; returns its handle.
  cudaStream_t enter_comm_stream() {
    STRATA_CUDA_CHECK(cudaSetDevice(device_.index));
    if (comm_stream_.handle() == nullptr) comm_stream_ = Stream::create(device_);
    auto compute = static_cast<cudaStream_t>(Stream::current(device_).handle());
    auto comm = static_cast<cudaStream_t>(comm_stream_.handle());
    cudaEvent_t ready = nullptr;
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    STRATA_CUDA_CHECK(cudaEventRecord(ready, compute));
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(comm, ready, 0));
    STRATA_CUDA_CHECK(cudaEventDestroy(ready));  // released once the wait is satisfied
    return comm;
  }

  ncclComm_t comm_ = nullptr;
  Device device_;
  Stream comm_stream_;  // asynchronous collectives; created on first use
  int size_ = 1;
  int rank_ = 0;
  uint64_t abort_hook_ = 0;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Device device) {
  STRATA_CHECK(device.is_cuda(), "make_nccl_communicator: device ", device.str(), " is not a CUDA device");
  STRATA_CHECK(bootstrap.device_type() == DeviceType::CPU, "make_nccl_communicator: the bootstrap communicator (",
               bootstrap.backend(), ") must carry host tensors");
  STRATA_CUDA_CHECK(cudaSetDevice(device.index));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
  Tensor bytes_t = Tensor::zeros({static_cast<int64_t>(sizeof id)}, DType::U8);
  std::memcpy(bytes_t.data_ptr(), &id, sizeof id);
  bootstrap.broadcast(bytes_t, 0);
  std::memcpy(&id, bytes_t.data_ptr(), sizeof id);
  ncclComm_t comm = nullptr;
  STRATA_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  auto c = std::make_shared<NcclCommunicator>(comm, device);
  c->set_deterministic(bootstrap.deterministic());
  c->set_label(bootstrap.label());
  return c;
}

#endif  // STRATA_WITH_NCCL

}  // namespace strata
