// The communicator of a meta build's process groups (parallel/communicator.h): a group of a given
// size in which this rank has a given position, so that layers can be built as rank r of a
// layout on the meta device (core/device.h) without MPI; it never communicates — every collective,
// point-to-point exchange, barrier and split is an internal error naming the group and the call.
// Reference: PyTorch's meta tensors (a model built to be described, not run); torch.distributed's
// FakeProcessGroup (a group of any size that moves no data).
#include <cstdlib>

#include "core/error.h"
#include "parallel/communicator.h"

namespace strata {

namespace {

class MetaCommunicator final : public Communicator {
 public:
  MetaCommunicator(int size, int rank) : size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const char* backend() const override { return "meta"; }
  DeviceType device_type() const override { return DeviceType::Meta; }

  void all_reduce(Tensor&, ReduceOp) override { refuse("all_reduce"); }
  void reduce_scatter(const Tensor&, Tensor&, ReduceOp) override { refuse("reduce_scatter"); }
  void all_gather(const Tensor&, Tensor&) override { refuse("all_gather"); }
  void all_gather_v(const Tensor&, Tensor&, const std::vector<int64_t>&) override { refuse("all_gather_v"); }
  void all_to_all(const Tensor&, Tensor&) override { refuse("all_to_all"); }
  void all_to_all_v(const Tensor&, const std::vector<int64_t>&, Tensor&, const std::vector<int64_t>&) override {
    refuse("all_to_all_v");
  }
  void broadcast(Tensor&, int) override { refuse("broadcast"); }
  void batch_send_recv(std::vector<PointToPoint>&) override { refuse("batch_send_recv"); }
  void barrier() override { refuse("barrier"); }
  std::unique_ptr<CommWork> all_reduce_async(Tensor&, ReduceOp) override {
    refuse("all_reduce_async");
    return nullptr;
  }
  std::unique_ptr<CommWork> reduce_scatter_async(const Tensor&, Tensor&, ReduceOp) override {
    refuse("reduce_scatter_async");
    return nullptr;
  }
  std::shared_ptr<Communicator> split(int, int) override {
    refuse("split");
    return nullptr;
  }

 private:
  [[noreturn]] void refuse(const char* op) const {
    STRATA_INTERNAL_ASSERT(false, op, " on the ", label(), " group of a meta build (rank ", rank_, " of ", size_,
                           "): a meta build describes a model and never communicates");
    std::abort();  // not reached: the assert aborts
  }
  int size_, rank_;
};

}  // namespace

std::shared_ptr<Communicator> make_meta_communicator(int size, int rank) {
  STRATA_INTERNAL_ASSERT(size >= 1 && rank >= 0 && rank < size, "make_meta_communicator: rank ", rank,
                         " of a group of ", size);
  return std::make_shared<MetaCommunicator>(size, rank);
}

}  // namespace strata
