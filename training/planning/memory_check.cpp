// The per-rank memory check (see memory_check.h).
#include "training/planning/memory_check.h"

#include <cstdio>

#include "core/error.h"
#include "training/planning/memory_plan.h"

namespace strata {

namespace {
std::string gib(int64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}
}  // namespace

void check_rank_memory(int64_t bytes_per_rank, int64_t ranks_sharing, int64_t available, const std::string& device) {
  const double need = static_cast<double>(bytes_per_rank) * static_cast<double>(ranks_sharing);
  if (need <= static_cast<double>(available)) return;
  STRATA_THROW_KIND(ErrorKind::Config, "this model needs about ", gib(bytes_per_rank), " per rank",
                    ranks_sharing > 1 ? " (" + std::to_string(ranks_sharing) + " ranks share " + device + ")" : "",
                    ", more than the ", gib(available), " of ", device,
                    " (`strata plan` itemises it); make the model smaller, use fewer ranks per node, or spread it over "
                    "more ranks: parallel.tensor_model_parallel_size, pipeline_model_parallel_size, "
                    "use_distributed_optimizer, model.recompute_granularity");
}

void check_rank_memory(const ResolvedConfig& cfg, Device device, int64_t ranks_on_node) {
  const LayoutPlan plan = plan_layout(cfg);
  int64_t peak = 0;
  for (const StagePlan& s : plan.stages) peak = std::max(peak, s.memory.static_bytes() + s.memory.activations_configured);
  const int64_t sharing = device.is_cpu() ? ranks_on_node : 1;
  check_rank_memory(peak, sharing, device_memory_bytes(device), device.is_cpu() ? "this host's memory" : device.str());
}

}  // namespace strata
