// Process groups as data: a group is the list of global ranks it holds,
// this rank's position in it, and the communicators that carry its collectives — a host one
// (MPI, or "self" for a group of one) and, on GPU ranks, a device one (NCCL). Each collective is
// routed by the tensor's device. Layers receive the groups they use explicitly; there is no
// global parallel state. A group built without communicators has size 1 and its collectives are
// identities (single-process training); a meta group has any size and never communicates.
// Reference: megatron/core/parallel_state.py (the groups), torch.distributed (the calls).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace strata {

class ProcessGroup {
 public:
  ProcessGroup() : ranks_{0} {}
  // A group without communicators: must have exactly one rank.
  ProcessGroup(std::string name, std::vector<int> ranks, int my_rank);
  // host: required (size == ranks.size()); device: optional (null on CPU ranks).
  ProcessGroup(std::string name, std::vector<int> ranks, int my_rank, std::shared_ptr<Communicator> host,
               std::shared_ptr<Communicator> device = nullptr);
  static ProcessGroup single(const std::string& name, int global_rank = 0) {
    return ProcessGroup(name, {global_rank}, global_rank);
  }
  // A meta build's group (a model built on the meta device to be described): these ranks, this
  // one among them, every collective an internal error (make_meta_communicator).
  static ProcessGroup meta(const std::string& name, std::vector<int> ranks, int my_rank);
  int size() const { return static_cast<int>(ranks_.size()); }
  int rank() const { return index_; }  // position of this rank in the group
  const std::vector<int>& ranks() const { return ranks_; }
  const std::string& name() const { return name_; }

  // The communicator for tensors on `device` (the self communicator for a group of one).
  Communicator& comm(DeviceType device) const;
  const std::shared_ptr<Communicator>& host_comm() const { return host_; }
  const std::shared_ptr<Communicator>& device_comm() const { return device_; }

  // Collectives, routed by the tensor's device (semantics: parallel/communicator.h).
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) const;
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op = ReduceOp::Sum) const;
  void all_gather(const Tensor& input, Tensor& output) const;
  void all_gather_v(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) const;
  void all_to_all(const Tensor& input, Tensor& output) const;
  void all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, Tensor& output,
                    const std::vector<int64_t>& recv_counts) const;
  void broadcast(Tensor& t, int root) const;
  void batch_send_recv(std::vector<PointToPoint>& ops) const;  // all tensors on one device
  void barrier() const;
  // Asynchronous all_reduce / reduce_scatter (Communicator::*_async; a group of one without
  // communicators returns a completed handle).
  std::unique_ptr<CommWork> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum) const;
  std::unique_ptr<CommWork> reduce_scatter_async(const Tensor& input, Tensor& output,
                                                 ReduceOp op = ReduceOp::Sum) const;

 private:
  std::string name_ = "world";
  const char* phase_ = "comm/world";  // phase-timer name of this group's collectives (core/phase_timer.h)
  std::vector<int> ranks_;
  int index_ = 0;
  std::shared_ptr<Communicator> host_;    // null: size-1 group (self)
  std::shared_ptr<Communicator> device_;  // null: no device communicator
};

// The groups one rank belongs to, in Megatron's order tp-cp-ep-dp-pp (parallel_state.py).
// Built by parallel/rank_grid.h from the parallel config; size 1 each in single-process runs.
struct ParallelGroups {
  int world_size = 1;
  int global_rank = 0;
  ProcessGroup world = ProcessGroup::single("world");
  ProcessGroup tp = ProcessGroup::single("tp");
  ProcessGroup cp = ProcessGroup::single("cp");
  ProcessGroup ep = ProcessGroup::single("ep");
  ProcessGroup dp = ProcessGroup::single("dp");
  ProcessGroup pp = ProcessGroup::single("pp");
  ProcessGroup dp_cp = ProcessGroup::single("dp_cp");
  ProcessGroup tp_cp = ProcessGroup::single("tp_cp");        // model-parallel ranks sharing a sequence
  ProcessGroup mp = ProcessGroup::single("mp");              // tp × pp (model-parallel group)
  ProcessGroup embedding = ProcessGroup::single("embedding");  // first + last pipeline stage
  ProcessGroup position_embedding = ProcessGroup::single("position_embedding");  // first stage
  ProcessGroup expert_tp = ProcessGroup::single("expert_tp");
  ProcessGroup expert_dp = ProcessGroup::single("expert_dp");
  ProcessGroup tp_ep = ProcessGroup::single("tp_ep");          // expert-TP × EP (MoE token exchange)
  ProcessGroup tp_dp_cp = ProcessGroup::single("tp_dp_cp");    // tp × cp × dp (MoE token counts)
  // cp_comm_type a2a+p2p (parallel.hierarchical_context_parallel_sizes [A, B]): the two levels of
  // Megatron's hierarchical cp groups inside this rank's cp group — cp_a2a: the A consecutive cp
  // ranks of its inner group, cp_p2p: the B cp ranks at the same position in their inner groups.
  // Groups of this rank alone otherwise.
  ProcessGroup cp_a2a = ProcessGroup::single("cp_a2a");
  ProcessGroup cp_p2p = ProcessGroup::single("cp_p2p");
  // Ranks off the first and last pipeline stage belong to no embedding group (and ranks off the
  // first stage to no position-embedding group): their `embedding` / `position_embedding` is then
  // a group of this rank alone, never used, and these flags are false.
  bool in_embedding_group = true;
  bool in_position_embedding_group = true;
  static ParallelGroups single_process() { return ParallelGroups{}; }
};

}  // namespace strata
