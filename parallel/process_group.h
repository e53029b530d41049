// Process groups as data (ARCHITECTURE decision 4): a group is the list of global ranks it holds
// and this rank's position in it. Layers receive the groups they use explicitly; there is no
// global parallel state. Until the parallelism issue lands every group has size 1 (this rank
// alone) and collectives over it are identities; the communicator (MPI for host tensors, NCCL for
// device tensors) will be attached to the same type.
#pragma once
#include <string>
#include <vector>

namespace strata {

class ProcessGroup {
 public:
  ProcessGroup() : ranks_{0} {}
  ProcessGroup(std::string name, std::vector<int> ranks, int my_rank);
  static ProcessGroup single(const std::string& name, int global_rank = 0) {
    return ProcessGroup(name, {global_rank}, global_rank);
  }
  int size() const { return static_cast<int>(ranks_.size()); }
  int rank() const { return index_; }  // position of this rank in the group
  const std::vector<int>& ranks() const { return ranks_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_ = "world";
  std::vector<int> ranks_;
  int index_ = 0;
};

// The groups one rank belongs to (Megatron's order tp-cp-ep-dp-pp). Size 1 each for now.
struct ParallelGroups {
  int world_size = 1;
  int global_rank = 0;
  ProcessGroup tp = ProcessGroup::single("tp");
  ProcessGroup cp = ProcessGroup::single("cp");
  ProcessGroup ep = ProcessGroup::single("ep");
  ProcessGroup dp = ProcessGroup::single("dp");
  ProcessGroup pp = ProcessGroup::single("pp");
  ProcessGroup dp_cp = ProcessGroup::single("dp_cp");
  ProcessGroup embedding = ProcessGroup::single("embedding");
  static ParallelGroups single_process() { return ParallelGroups{}; }
};

}  // namespace strata
