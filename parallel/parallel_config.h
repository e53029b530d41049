// ParallelConfig: the `parallel` config section — the parallel layout (tensor, pipeline, context,
// expert and data parallelism) with Megatron's argument names, and the pure layout arithmetic
// that validation and the rank grid share.
// Reference: megatron/training/arguments.py (_add_distributed_args, validate_args: world size
// divisibility, data-parallel size, uneven first/last pipeline stages, virtual pipeline stages).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/config_table.h"

namespace strata {

// How context-parallel attention communicates (Megatron/TE cp_comm_type; parallel/context_parallel.h):
// K/V all-gathered, K/V passed round a ring, Q/K/V/output exchanged by all-to-all over the heads
// (Ulysses), or all-to-all inside the inner hierarchical groups and the ring across the outer ones.
enum class CpCommType { AllGather, P2P, A2A, A2AP2P };
inline constexpr config::EnumName<CpCommType> kCpCommTypeNames[] = {
    {CpCommType::AllGather, "all_gather"},
    {CpCommType::P2P, "p2p"},
    {CpCommType::A2A, "a2a"},
    {CpCommType::A2AP2P, "a2a+p2p"},
};

struct ParallelConfig {
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  std::optional<int64_t> virtual_pipeline_model_parallel_size;  // null → no interleaving
  std::optional<int64_t> num_layers_in_first_pipeline_stage;    // null → even split
  std::optional<int64_t> num_layers_in_last_pipeline_stage;     // null → even split
  int64_t context_parallel_size = 1;
  CpCommType cp_comm_type = CpCommType::P2P;  // Megatron's default (--cp-comm-type p2p)
  // a2a+p2p: [inner, outer] with inner x outer = context_parallel_size; empty: not hierarchical.
  std::vector<int64_t> hierarchical_context_parallel_sizes;
  int64_t expert_model_parallel_size = 1;
  std::optional<int64_t> expert_tensor_parallel_size;  // null → tensor_model_parallel_size
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  bool overlap_grad_reduce = false;             // buckets reduced as the backward finishes them (GPU)
  std::optional<int64_t> ddp_bucket_size;       // elements; null → Megatron's default
  int64_t distributed_timeout_minutes = 10;
  std::optional<int64_t> world_size;  // null → the number of launched processes (MPI)

  // tp·pp·cp: the ranks that hold one replica of the model.
  int64_t model_parallel_size() const {
    return tensor_model_parallel_size * pipeline_model_parallel_size * context_parallel_size;
  }
};

// The `parallel` section's fields for the config table.
config::SectionFields<ParallelConfig> parallel_config_fields();

// Resolves world_size (from `launched_world_size` when null; a mismatch is an error) and
// expert_tensor_parallel_size, then checks the rules that need only the parallel section: the
// world size divisible by tp·pp·cp and by etp·ep·pp, hierarchical_context_parallel_sizes given
// exactly with cp_comm_type a2a+p2p (two sizes, product cp), sequence parallelism needing tp > 1, virtual
// stages needing pp > 1, uneven stages needing pp > 1. Pure; throws config::ConfigError. The MoE
// rules on ep and etp (experts % ep, expert FFN % etp …) need the model: validate_moe_layout()
// in models/config/moe_config.h.
void finalize_parallel_config(ParallelConfig& p, std::optional<int64_t> launched_world_size);

// world_size / (tp·pp·cp); requires a finalized config.
int64_t data_parallel_size(const ParallelConfig& p);

// Layers of each pipeline stage, first to last: num_layers / pp each, or with
// num_layers_in_first/last_pipeline_stage set, those counts and the rest split evenly over the
// middle stages. With virtual stages every stage's count must divide by their number. Throws
// config::ConfigError naming the field when the layers cannot be split that way.
std::vector<int64_t> layers_per_pipeline_stage(const ParallelConfig& p, int64_t num_layers);

}  // namespace strata
