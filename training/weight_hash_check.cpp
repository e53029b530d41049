// The weight-hash check across data-parallel replicas (see weight_hash_check.h).
// Reference: megatron/core/utils.py (check_param_hashes_across_dp_replicas).
#include "training/weight_hash_check.h"

#include "core/blake2b.h"
#include "core/error.h"
#include "core/tensor.h"

namespace strata {

namespace {
constexpr size_t kHashBytes = 12;  // two 48-bit halves, each exact in a double

// A parameter's hash as two doubles (the value's bytes; bf16 values hashed as they are).
std::pair<double, double> parameter_hash(const Parameter& p) {
  const Tensor host = p.value.to(Device::cpu()).contiguous();
  Blake2b h(kHashBytes);
  h.update(host.data_ptr(), static_cast<size_t>(host.numel()) * host.element_size());
  const std::vector<uint8_t> d = h.digest();
  auto half = [&](size_t at) {
    uint64_t x = 0;
    for (size_t i = 0; i < kHashBytes / 2; ++i) x = (x << 8) | d[at + i];
    return static_cast<double>(x);
  };
  return {half(0), half(kHashBytes / 2)};
}

// Appends the names of `params` whose hash differs from `group` rank 0's.
void compare_over(const std::vector<const Parameter*>& params, const ProcessGroup& group, std::vector<std::string>& out) {
  if (group.size() == 1 || params.empty()) return;
  const auto n = static_cast<int64_t>(params.size());
  std::vector<double> local;
  for (const Parameter* p : params) {
    const auto [a, b] = parameter_hash(*p);
    local.push_back(a);
    local.push_back(b);
  }
  Tensor in = Tensor::from_vector(local, {2 * n}, DType::F64, Device::cpu());
  Tensor all = Tensor::empty({group.size() * 2 * n}, DType::F64, Device::cpu());
  group.all_gather(in, all);
  const std::vector<double> gathered = all.to_vector();  // rank 0's first
  for (int64_t i = 0; i < n; ++i)
    if (gathered[static_cast<size_t>(2 * i)] != local[static_cast<size_t>(2 * i)] ||
        gathered[static_cast<size_t>(2 * i + 1)] != local[static_cast<size_t>(2 * i + 1)])
      out.push_back(params[static_cast<size_t>(i)]->name);
}
}  // namespace

std::vector<std::string> weight_hash_differences(const std::vector<Parameter*>& params, const ParallelGroups& groups) {
  std::vector<const Parameter*> dense, expert;
  for (const Parameter* p : params) (p->expert_parallel ? expert : dense).push_back(p);
  std::vector<std::string> out;
  compare_over(dense, groups.dp_cp, out);
  compare_over(expert, groups.expert_dp, out);
  return out;
}

void check_weight_hashes_across_replicas(const std::vector<Parameter*>& params, const ParallelGroups& groups,
                                         int64_t iteration) {
  const std::vector<std::string> differ = weight_hash_differences(params, groups);
  Tensor any = Tensor::full({1}, differ.empty() ? 0.0 : 1.0, DType::F64, Device::cpu());
  if (groups.world.size() > 1) groups.world.all_reduce(any, ReduceOp::Max);
  if (any.to_vector()[0] == 0.0) return;
  std::string names;
  for (size_t i = 0; i < differ.size() && i < 8; ++i) names += (i ? ", " : "") + differ[i];
  if (differ.size() > 8) names += ", … (" + std::to_string(differ.size()) + " in all)";
  STRATA_CHECK(differ.empty(), "weight hashes differ across data-parallel replicas after ", iteration,
               " iterations (--check-weight-hash-across-dp-replicas-interval): on global rank ",
               groups.global_rank, ", ", names, " differ from the replica group's rank 0");
  STRATA_CHECK(false, "weight hashes differ across data-parallel replicas after ", iteration,
               " iterations (--check-weight-hash-across-dp-replicas-interval) on another rank; its log names the "
               "parameters");
}

}  // namespace strata
