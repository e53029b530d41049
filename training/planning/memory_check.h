// The memory a rank will need, checked against the machine before anything is allocated: the
// planner's bytes (training/planning/memory_plan.h) of the stage that needs the most — weights, the f32
// master copy, gradients, Adam state and the activations of the in-flight micro-batches under the
// config's own recompute — against the device's memory (a GPU's, or for CPU ranks the host's
// physical memory shared by the ranks on this node). A layout that cannot fit is refused with
// both numbers instead of failing in the allocator, or after minutes of building layers.
// Reference: Megatron-LM's report_memory / the theoretical memory of
// megatron/training/theoretical_memory_usage.py (what it estimates, here enforced).
#pragma once
#include <cstdint>

#include "core/device.h"
#include "training/config/config.h"

namespace strata {

// bytes_per_rank: the peak stage's need; available: what those ranks share. Throws an
// ErrorKind::Config error when bytes_per_rank · ranks_sharing > available.
void check_rank_memory(int64_t bytes_per_rank, int64_t ranks_sharing, int64_t available, const std::string& device);

// The same from a validated config (model.vocab_size set) on `device`, with `ranks_on_node`
// processes of the job on this node (CPU ranks share the host's memory; GPUs are one per rank).
void check_rank_memory(const ResolvedConfig& cfg, Device device, int64_t ranks_on_node);

}  // namespace strata
