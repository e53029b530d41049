// ProcessGroup construction and device routing (parallel/process_group.h).
#include "parallel/process_group.h"

#include <algorithm>

#include "core/error.h"
#include "core/phase_timer.h"

namespace strata {

namespace {
int position_of(const std::vector<int>& ranks, int my_rank, const std::string& name) {
  auto it = std::find(ranks.begin(), ranks.end(), my_rank);
  STRATA_INTERNAL_ASSERT(it != ranks.end(), "rank ", my_rank, " is not in group ", name);
  return static_cast<int>(it - ranks.begin());
}

// "comm/<group kind>" as a string literal (phase timers keep the pointer); groups named otherwise
// (tests' hand-made groups) share "comm/other".
const char* phase_name(const std::string& group) {
  static const char* const kNames[][2] = {
      {"world", "comm/world"}, {"tp", "comm/tp"}, {"cp", "comm/cp"}, {"dp", "comm/dp"}, {"dp_cp", "comm/dp_cp"},
      {"tp_cp", "comm/tp_cp"}, {"pp", "comm/pp"}, {"mp", "comm/mp"}, {"embedding", "comm/embedding"},
      {"position_embedding", "comm/position_embedding"}, {"ep", "comm/ep"}, {"expert_tp", "comm/expert_tp"},
      {"expert_dp", "comm/expert_dp"}, {"tp_ep", "comm/tp_ep"}, {"tp_dp_cp", "comm/tp_dp_cp"},
      {"cp_a2a", "comm/cp_a2a"}, {"cp_p2p", "comm/cp_p2p"}};
  for (const auto& n : kNames)
    if (group == n[0]) return n[1];
  return "comm/other";
}

Communicator& self_communicator(DeviceType device) {
  static std::shared_ptr<Communicator> cpu = make_self_communicator(DeviceType::CPU);
  static std::shared_ptr<Communicator> cuda = make_self_communicator(DeviceType::CUDA);
  return device == DeviceType::CPU ? *cpu : *cuda;
}
}  // namespace

ProcessGroup::ProcessGroup(std::string name, std::vector<int> ranks, int my_rank)
    : name_(std::move(name)), phase_(phase_name(name_)), ranks_(std::move(ranks)) {
  index_ = position_of(ranks_, my_rank, name_);
  STRATA_INTERNAL_ASSERT(ranks_.size() == 1, "group ", name_, " of ", ranks_.size(),
                         " ranks needs a communicator");
}

ProcessGroup::ProcessGroup(std::string name, std::vector<int> ranks, int my_rank, std::shared_ptr<Communicator> host,
                           std::shared_ptr<Communicator> device)
    : name_(std::move(name)), phase_(phase_name(name_)), ranks_(std::move(ranks)), host_(std::move(host)),
      device_(std::move(device)) {
  index_ = position_of(ranks_, my_rank, name_);
  STRATA_INTERNAL_ASSERT(host_ != nullptr, "group ", name_, ": no host communicator");
  STRATA_INTERNAL_ASSERT(host_->size() == size() && host_->rank() == index_, "group ", name_,
                         ": host communicator does not match the rank list");
  STRATA_INTERNAL_ASSERT(device_ == nullptr || (device_->size() == size() && device_->rank() == index_),
                         "group ", name_, ": device communicator does not match the rank list");
  host_->set_label(name_);
  if (device_ != nullptr) device_->set_label(name_);
}

ProcessGroup ProcessGroup::meta(const std::string& name, std::vector<int> ranks, int my_rank) {
  const int position = position_of(ranks, my_rank, name);
  std::shared_ptr<Communicator> c = make_meta_communicator(static_cast<int>(ranks.size()), position);
  return ProcessGroup(name, std::move(ranks), my_rank, c, c);  // host and device alike: neither communicates
}

Communicator& ProcessGroup::comm(DeviceType device) const {
  if (size() == 1 && host_ == nullptr) return self_communicator(device);
  if (device == DeviceType::CUDA) {
    STRATA_CHECK(device_ != nullptr, "process group ", name_, " has no device communicator (NCCL) for a CUDA tensor");
    return *device_;
  }
  return *host_;
}

// Blocking collectives are timed under phase_ when phase timers are on (`strata bench train
// --phases`: the communication share of a step per parallel dimension). Host time: on CUDA it
// measures the enqueue, not the transfer.
void ProcessGroup::all_reduce(Tensor& t, ReduceOp op) const {
  const phase_timer::Scope scope(phase_);
  comm(t.device().type).all_reduce(t, op);
}
void ProcessGroup::reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) const {
  const phase_timer::Scope scope(phase_);
  comm(input.device().type).reduce_scatter(input, output, op);
}
void ProcessGroup::all_gather(const Tensor& input, Tensor& output) const {
  const phase_timer::Scope scope(phase_);
  comm(input.device().type).all_gather(input, output);
}
void ProcessGroup::all_gather_v(const Tensor& input, Tensor& output, const std::vector<int64_t>& counts) const {
  const phase_timer::Scope scope(phase_);
  comm(input.device().type).all_gather_v(input, output, counts);
}
void ProcessGroup::all_to_all(const Tensor& input, Tensor& output) const {
  const phase_timer::Scope scope(phase_);
  comm(input.device().type).all_to_all(input, output);
}
void ProcessGroup::all_to_all_v(const Tensor& input, const std::vector<int64_t>& send_counts, Tensor& output,
                                const std::vector<int64_t>& recv_counts) const {
  const phase_timer::Scope scope(phase_);
  comm(input.device().type).all_to_all_v(input, send_counts, output, recv_counts);
}
void ProcessGroup::broadcast(Tensor& t, int root) const {
  const phase_timer::Scope scope(phase_);
  comm(t.device().type).broadcast(t, root);
}
void ProcessGroup::batch_send_recv(std::vector<PointToPoint>& ops) const {
  if (ops.empty()) return;
  const phase_timer::Scope scope(phase_);
  comm(ops.front().tensor.device().type).batch_send_recv(ops);
}
std::unique_ptr<CommWork> ProcessGroup::all_reduce_async(Tensor& t, ReduceOp op) const {
  return comm(t.device().type).all_reduce_async(t, op);
}
std::unique_ptr<CommWork> ProcessGroup::reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op) const {
  return comm(input.device().type).reduce_scatter_async(input, output, op);
}
void ProcessGroup::barrier() const {
  if (host_ != nullptr) host_->barrier();
}

}  // namespace strata
