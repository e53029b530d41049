// Communicator: the collective and point-to-point operations one process group needs, behind one
// interface with three backends —
//   self : a group of one rank (every collective is an identity or a copy; no library involved),
//   mpi  : host tensors over MPI (CPU ranks; also small host-side exchanges on GPU ranks),
//   nccl : device tensors over NCCL (GPU ranks; the unique id is broadcast over MPI) —
// and the meta build's groups (a size and a position, never communicating: make_meta_communicator).
// A ProcessGroup (parallel/process_group.h) holds a host communicator and, on GPU ranks, a device
// communicator, and routes each call by the tensor's device.
// All tensors are contiguous; counts and offsets are in elements of the flattened tensor; every
// rank of the group calls every collective in the same order (MPI/NCCL rules).
// Deterministic mode (training.deterministic): all_reduce and reduce_scatter sum in rank order
// 0,1,…,n−1 with the f32/f64 accumulation of the dtype, so the result is bit-identical on every
// rank and from run to run (MPI: gather then ordered sum; NCCL: NCCL_ALGO=Ring, NCCL_PROTO=Simple
// set before the communicator is created).
// Reference: torch.distributed (ProcessGroup API), megatron/core/parallel_state.py.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace strata {

enum class ReduceOp { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op);

// One send or receive of a batched point-to-point exchange.
struct PointToPoint {
  enum class Kind { Send, Recv };
  Kind kind = Kind::Send;
  Tensor tensor;     // send: read; recv: written (preallocated, contiguous)
  int peer = 0;      // rank in this communicator
  int tag = 0;
  static PointToPoint send(Tensor t, int peer, int tag = 0) { return {Kind::Send, std::move(t), peer, tag}; }
  static PointToPoint recv(Tensor t, int peer, int tag = 0) { return {Kind::Recv, std::move(t), peer, tag}; }
};

// A collective started asynchronously (torch.distributed's async_op=True work handle, which
// Megatron's DDP keeps per bucket). wait() completes it: afterwards the output holds the result
// on the host (MPI), or — on a device communicator — the calling thread's current stream is
// ordered after it (kernels enqueued later see the result; no host synchronisation). Until
// wait() returns, the tensors given to the call must stay alive and unmodified (the handle
// keeps their storage referenced). wait() may be called more than once; a handle destroyed
// without wait() waits in its destructor (errors then are logged, not thrown).
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual void wait() = 0;
  // Drives progress without blocking (MPI_Test); true once the operation is complete (wait()
  // then does only the local finishing work, e.g. the rank-ordered sum in deterministic mode).
  virtual bool test() { return false; }
};

// A handle whose work already ran (the blocking fallback): wait() and test() return at once.
std::unique_ptr<CommWork> completed_comm_work();

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;             // this process's rank in the communicator
  virtual const char* backend() const = 0;  // "self" | "mpi" | "nccl"
  virtual DeviceType device_type() const = 0;  // where its tensors must live

  // t: any shape, in place; every rank ends with the reduction (Avg = Sum / size).
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  // input: [size·n] (flattened) → output: [n], rank r receives the reduction of chunk r.
  virtual void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // input: [n] → output: [size·n], the ranks' inputs concatenated in rank order.
  virtual void all_gather(const Tensor& input, Tensor& output) = 0;
  // Uneven: input: [counts[rank]] → output: [Σ counts], concatenated in rank order.
  virtual void all_gather_v(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) = 0;
  // input: [size·n] → output: [size·n]; chunk j of rank i's input lands in chunk i of rank j.
  virtual void all_to_all(const Tensor& input, Tensor& output) = 0;
  // Uneven (MoE token dispatch): send_counts[j] elements go to rank j, taken from input in rank
  // order; recv_counts[i] elements come from rank i, stored in output in rank order.
  virtual void all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, Tensor& output,
                            const std::vector<int64_t>& recv_counts) = 0;
  // t: in place; every rank ends with root's values.
  virtual void broadcast(Tensor& t, int root) = 0;
  // All sends and receives start together and complete before return (no ordering deadlock).
  virtual void batch_send_recv(std::vector<PointToPoint>& ops) = 0;
  virtual void barrier() = 0;

  // Asynchronous all_reduce / reduce_scatter (same semantics and arguments as the blocking ones,
  // including deterministic mode's rank-ordered sums): start the collective and return its
  // handle. Every rank must start the same asynchronous collectives in the same order, like the
  // blocking ones. The default runs the blocking collective and returns a completed handle (the
  // self communicator; dtypes a backend does not start asynchronously). MPI: MPI_Iallreduce /
  // MPI_Ireduce_scatter_block, or in deterministic mode MPI_Iallgather / MPI_Ialltoall with the
  // ordered sum in wait(). NCCL: the collective on the communicator's communication stream after
  // an event of the current stream; wait() makes the current stream wait for it.
  virtual std::unique_ptr<CommWork> all_reduce_async(Tensor& t, ReduceOp op);
  virtual std::unique_ptr<CommWork> reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op);

  // A new communicator of the ranks that pass the same color, ordered by key (MPI_Comm_split /
  // ncclCommSplit). Collective over this communicator. color < 0: this rank joins none (returns
  // null).
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

  // Rank-ordered summation for all_reduce/reduce_scatter (see the file comment).
  void set_deterministic(bool on) { deterministic_ = on; }
  bool deterministic() const { return deterministic_; }

  // The name of the group this communicator carries ("world", "tp", …; ProcessGroup sets it),
  // used by the watchdog (parallel/watchdog.h) to name a collective that does not complete.
  void set_label(std::string label) { label_ = std::move(label); }
  const std::string& label() const { return label_; }

 protected:
  bool deterministic_ = false;
  std::string label_ = "world";
};

// A group of one rank: collectives are identities (all_reduce/broadcast) or copies.
std::shared_ptr<Communicator> make_self_communicator(DeviceType device = DeviceType::CPU);
// A meta build's group (parallel/meta_communicator.cpp): `size` ranks, this one at `rank`; every
// collective, exchange, barrier and split is an internal error (it never communicates).
std::shared_ptr<Communicator> make_meta_communicator(int size, int rank);

}  // namespace strata
