// The communicator of a group of one rank (parallel/communicator.h): all_reduce and broadcast are
// identities (Avg divides by 1), gathers, scatters and all-to-all are copies, a batched
// point-to-point exchange may only pair a send with a receive to itself. Also the blocking
// fallback of the asynchronous collectives every backend inherits (Communicator::*_async).
#include <algorithm>

#include "core/error.h"
#include "parallel/communicator.h"

namespace strata {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

namespace {
struct CompletedWork final : CommWork {
  void wait() override {}
  bool test() override { return true; }
};
}  // namespace

std::unique_ptr<CommWork> completed_comm_work() { return std::make_unique<CompletedWork>(); }

std::unique_ptr<CommWork> Communicator::all_reduce_async(Tensor& t, ReduceOp op) {
  all_reduce(t, op);
  return completed_comm_work();
}

std::unique_ptr<CommWork> Communicator::reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op) {
  reduce_scatter(input, output, op);
  return completed_comm_work();
}

namespace {

void check_copy(const Tensor& input, const Tensor& output, const char* op) {
  check_contiguous(input, op, "input");
  check_contiguous(output, op, "output");
  STRATA_CHECK(input.numel() == output.numel(), op, ": input has ", input.numel(), " elements, output ",
               output.numel(), " (one rank)");
  STRATA_CHECK(input.dtype() == output.dtype(), op, ": input and output dtypes differ");
}

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(DeviceType device) : device_(device) {}
  int size() const override { return 1; }
  int rank() const override { return 0; }
  const char* backend() const override { return "self"; }
  DeviceType device_type() const override { return device_; }

  void all_reduce(Tensor& t, ReduceOp) override { check_contiguous(t, "all_reduce", "t"); }
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp) override {
    check_copy(input, output, "reduce_scatter");
    output.view(input.shape()).copy_(input);
  }
  void all_gather(const Tensor& input, Tensor& output) override {
    check_copy(input, output, "all_gather");
    output.view(input.shape()).copy_(input);
  }
  void all_gather_v(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) override {
    STRATA_CHECK(counts.size() == 1 && counts[0] == input.numel(), "all_gather_v: counts must be {",
                 input.numel(), "} on one rank");
    all_gather(input, output);
  }
  void all_to_all(const Tensor& input, Tensor& output) override {
    check_copy(input, output, "all_to_all");
    output.view(input.shape()).copy_(input);
  }
  void all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, Tensor& output,
                    const std::vector<int64_t>& recv_counts) override {
    STRATA_CHECK(send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0],
                 "all_to_all_v: one rank sends to itself what it receives");
    STRATA_CHECK(send_counts[0] <= input.numel() && recv_counts[0] <= output.numel(),
                 "all_to_all_v: counts exceed the tensors");
    if (send_counts[0] == 0) return;
    output.flatten().narrow(0, 0, recv_counts[0]).copy_(input.flatten().narrow(0, 0, send_counts[0]));
  }
  void broadcast(Tensor& t, int root) override {
    STRATA_CHECK(root == 0, "broadcast: root ", root, " outside a group of one");
  }
  void batch_send_recv(std::vector<PointToPoint>& ops) override {
    // Pair each send with the receive of the same tag (peer must be 0).
    for (auto& op : ops) STRATA_CHECK(op.peer == 0, "batch_send_recv: peer ", op.peer, " outside a group of one");
    for (auto& recv : ops) {
      if (recv.kind != PointToPoint::Kind::Recv) continue;
      auto send = std::find_if(ops.begin(), ops.end(), [&](const PointToPoint& s) {
        return s.kind == PointToPoint::Kind::Send && s.tag == recv.tag;
      });
      STRATA_CHECK(send != ops.end(), "batch_send_recv: a receive (tag ", recv.tag, ") without a matching send");
      recv.tensor.copy_(send->tensor);
    }
  }
  void barrier() override {}
  std::shared_ptr<Communicator> split(int color, int) override {
    if (color < 0) return nullptr;
    return std::make_shared<SelfCommunicator>(device_);
  }

 private:
  DeviceType device_;
};

}  // namespace

std::shared_ptr<Communicator> make_self_communicator(DeviceType device) {
  return std::make_shared<SelfCommunicator>(device);
}

}  // namespace strata
