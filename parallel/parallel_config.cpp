// The `parallel` config section: field declarations and layout arithmetic (parallel/parallel_config.h).
// Reference: megatron/training/arguments.py (validate_args), megatron/core/parallel_state.py
// (initialize_model_parallel: world size divisible by tp·pp·cp and by etp·ep·pp).
#include "parallel/parallel_config.h"

#include <string>

#include "core/logging.h"
#include "parallel/distributed.h"

namespace strata {

using config::ConfigError;
using config::positive;

config::SectionFields<ParallelConfig> parallel_config_fields() {
  using P = ParallelConfig;
  config::SectionFields<P> f;
  f.add("tensor_model_parallel_size", &P::tensor_model_parallel_size, "Tensor-parallel group size (tp).")
      .check(positive());
  f.add("pipeline_model_parallel_size", &P::pipeline_model_parallel_size, "Pipeline-parallel stages (pp).")
      .check(positive());
  f.add("virtual_pipeline_model_parallel_size", &P::virtual_pipeline_model_parallel_size,
        "Virtual stages (model chunks) per pipeline rank for the interleaved schedule. null: none.")
      .check(positive());
  f.add("num_layers_in_first_pipeline_stage", &P::num_layers_in_first_pipeline_stage,
        "Layers in the first pipeline stage when uneven. null: an even split.")
      .check(positive());
  f.add("num_layers_in_last_pipeline_stage", &P::num_layers_in_last_pipeline_stage,
        "Layers in the last pipeline stage when uneven. null: an even split.")
      .check(positive());
  f.add("context_parallel_size", &P::context_parallel_size,
        "Context-parallel group size (cp): the sequence is split over cp ranks.")
      .check(positive());
  f.add_enum("cp_comm_type", &P::cp_comm_type, kCpCommTypeNames,
             "Context-parallel communication in attention (Megatron's --cp-comm-type, one type for every layer): "
             "all_gather (K, V all-gathered over cp), p2p (ring of batched send/recv with log-sum-exp merging of "
             "partial attention; Megatron's default), a2a (Ulysses: an all-to-all turns the local rows of all heads "
             "into all rows of num_attention_heads/cp heads, attention over the whole sequence, the output sent back "
             "by the inverse all-to-all; query heads and query groups per tensor-parallel rank must divide by cp) or "
             "a2a+p2p (hierarchical: a2a inside groups of hierarchical_context_parallel_sizes[0] consecutive cp "
             "ranks, then the p2p ring across the hierarchical_context_parallel_sizes[1] groups).");
  f.add("hierarchical_context_parallel_sizes", &P::hierarchical_context_parallel_sizes,
        "With cp_comm_type a2a+p2p (and only then): [inner, outer], inner x outer = context_parallel_size. The "
        "inner (a2a) groups are consecutive cp ranks, the outer (p2p) groups every inner-th cp rank (Megatron's "
        "create_hierarchical_groups). Empty: not hierarchical.")
      .check(positive());
  f.add("expert_model_parallel_size", &P::expert_model_parallel_size,
        "Expert-parallel group size (ep): the routed experts of each MoE layer are split over ep ranks "
        "(model.num_experts divisible by ep; rank r holds experts [r*E/ep, (r+1)*E/ep)), the routed tokens moved "
        "by model.moe_token_dispatcher_type; expert gradients are reduced over the expert-data-parallel group "
        "world/(etp x ep x pp). 1 for a dense model.")
      .check(positive());
  f.add("expert_tensor_parallel_size", &P::expert_tensor_parallel_size,
        "Tensor-parallel size inside the experts (etp): each expert's FFN (model.moe_ffn_hidden_size) is split "
        "over etp ranks (linear_fc1 by rows, linear_fc2 by columns; the group's routed tokens gathered to every "
        "shard); world_size must be divisible by etp x ep x pp. null: tensor_model_parallel_size.")
      .check(positive());
  f.add("sequence_parallel", &P::sequence_parallel,
        "Shard norms and dropout activations along the sequence over the tensor-parallel group. At "
        "tensor_model_parallel_size 1 it is switched off with a warning, as Megatron does.");
  f.add("use_distributed_optimizer", &P::use_distributed_optimizer,
        "Shard optimizer state and master weights over the data-parallel group (ZeRO-1).");
  f.add("overlap_grad_reduce", &P::overlap_grad_reduce,
        "Reduce gradients in buckets as the backward pass finishes them (overlapped on GPU). false: one "
        "bucket, reduced after the backward of the last micro-batch.");
  f.add("ddp_bucket_size", &P::ddp_bucket_size,
        "Gradient bucket size in elements with overlap_grad_reduce. null: max(40000000, 1000000 x "
        "data-parallel size) (Megatron).")
      .check(positive());
  f.add("distributed_timeout_minutes", &P::distributed_timeout_minutes, "Timeout of collective operations, in minutes.")
      .check(positive());
  f.add("world_size", &P::world_size,
        "Total number of ranks. null: the number of launched processes; set it to check or plan a "
        "layout without launching (--validate-only, plan).")
      .check(positive());
  return f;
}

static std::string str(int64_t x) {
  return std::to_string(x);
}

// Megatron's validate_args: the sizes multiply to cp, and a2a+p2p needs them. Strata also refuses
// them without a2a+p2p (where nothing would use them) and takes exactly two levels (Transformer
// Engine's a2a+p2p uses the first as the a2a group and the second as the p2p ring).
static void check_hierarchical_context_parallel(const ParallelConfig& p) {
  const auto& h = p.hierarchical_context_parallel_sizes;
  const char* field = "parallel.hierarchical_context_parallel_sizes";
  const bool a2a_p2p = p.cp_comm_type == CpCommType::A2AP2P;
  if (a2a_p2p && h.empty())
    throw ConfigError(field, "must be set when parallel.cp_comm_type is a2a+p2p ([inner a2a size, outer p2p size])");
  if (h.empty()) return;
  if (!a2a_p2p)
    throw ConfigError(field, "is used only with parallel.cp_comm_type a2a+p2p (it is " +
                                 std::string(config::enum_to_string(std::span<const config::EnumName<CpCommType>>(kCpCommTypeNames), p.cp_comm_type)) + "); leave it empty");
  if (h.size() != 2)
    throw ConfigError(field, "takes two sizes [inner a2a, outer p2p], got " + std::to_string(h.size()));
  if (h[0] * h[1] != p.context_parallel_size)
    throw ConfigError(field, str(h[0]) + " x " + str(h[1]) + " is not parallel.context_parallel_size (" +
                                 str(p.context_parallel_size) + ")");
}

void finalize_parallel_config(ParallelConfig& p, std::optional<int64_t> launched_world_size) {
  if (!p.world_size) p.world_size = launched_world_size.value_or(1);
  if (launched_world_size && *p.world_size != *launched_world_size)
    throw ConfigError("parallel.world_size", str(*p.world_size) + " differs from the number of launched processes (" +
                                                 str(*launched_world_size) + ")");
  if (!p.expert_tensor_parallel_size) p.expert_tensor_parallel_size = p.tensor_model_parallel_size;

  const int64_t world = *p.world_size, tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size;
  const int64_t cp = p.context_parallel_size, ep = p.expert_model_parallel_size, etp = *p.expert_tensor_parallel_size;
  if (world % (tp * pp * cp) != 0)
    throw ConfigError("parallel.world_size", str(world) + " is not divisible by parallel.tensor_model_parallel_size (" +
                                                 str(tp) + ") x parallel.pipeline_model_parallel_size (" + str(pp) +
                                                 ") x parallel.context_parallel_size (" + str(cp) + ")");
  if (world % (etp * ep * pp) != 0)
    throw ConfigError("parallel.expert_model_parallel_size",
                      "parallel.world_size (" + str(world) +
                          ") is not divisible by parallel.expert_tensor_parallel_size (" + str(etp) +
                          ") x parallel.expert_model_parallel_size (" + str(ep) +
                          ") x parallel.pipeline_model_parallel_size (" + str(pp) + ")");
  check_hierarchical_context_parallel(p);
  if (p.sequence_parallel && tp == 1) {  // Megatron's validate_args: warn (rank 0) and go on
    if (launched_rank().value_or(0) == 0)
      log::warn("Disabling sequence parallelism because tensor model parallelism is disabled "
                "(parallel.sequence_parallel at tensor_model_parallel_size 1)");
    p.sequence_parallel = false;
  }
  if (p.virtual_pipeline_model_parallel_size && pp == 1)
    throw ConfigError("parallel.virtual_pipeline_model_parallel_size",
                      "needs parallel.pipeline_model_parallel_size > 1 (it is 1)");
  for (auto [name, v] : {std::pair{"num_layers_in_first_pipeline_stage", p.num_layers_in_first_pipeline_stage},
                         std::pair{"num_layers_in_last_pipeline_stage", p.num_layers_in_last_pipeline_stage}})
    if (v && pp == 1)
      throw ConfigError(std::string("parallel.") + name, "needs parallel.pipeline_model_parallel_size > 1 (it is 1)");
}

int64_t data_parallel_size(const ParallelConfig& p) {
  STRATA_INTERNAL_ASSERT(p.world_size.has_value(), "ParallelConfig read before finalize_parallel_config()");
  return *p.world_size / p.model_parallel_size();
}

std::vector<int64_t> layers_per_pipeline_stage(const ParallelConfig& p, int64_t num_layers) {
  const int64_t pp = p.pipeline_model_parallel_size;
  const auto& first = p.num_layers_in_first_pipeline_stage;
  const auto& last = p.num_layers_in_last_pipeline_stage;
  std::vector<int64_t> stages(pp, 0);
  if (!first && !last) {
    if (num_layers % pp != 0)
      throw ConfigError("model.num_layers",
                        str(num_layers) + " is not divisible by parallel.pipeline_model_parallel_size (" + str(pp) +
                            "); set parallel.num_layers_in_first_pipeline_stage / "
                            "num_layers_in_last_pipeline_stage for an uneven split");
    for (auto& s : stages) s = num_layers / pp;
  } else {
    const char* field =
        first ? "parallel.num_layers_in_first_pipeline_stage" : "parallel.num_layers_in_last_pipeline_stage";
    if (pp == 1) throw ConfigError(field, "needs parallel.pipeline_model_parallel_size > 1 (it is 1)");
    int64_t rest = num_layers - first.value_or(0) - last.value_or(0);
    int64_t middle = pp - (first ? 1 : 0) - (last ? 1 : 0);
    if (rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && (rest % middle != 0 || rest / middle == 0)))
      throw ConfigError(field, "with model.num_layers " + str(num_layers) +
                                   " and parallel.pipeline_model_parallel_size " + str(pp) + ", the " + str(rest) +
                                   " remaining layers cannot be split evenly over " + str(middle) +
                                   " other stage(s) with at least one layer each");
    for (int64_t i = 0; i < pp; ++i) stages[i] = middle > 0 ? rest / middle : 0;
    if (first) stages.front() = *first;
    if (last) stages.back() = *last;
  }
  if (p.virtual_pipeline_model_parallel_size) {
    int64_t vpp = *p.virtual_pipeline_model_parallel_size;
    for (int64_t i = 0; i < pp; ++i)
      if (stages[i] % vpp != 0)
        throw ConfigError("parallel.virtual_pipeline_model_parallel_size",
                          "pipeline stage " + str(i) + " has " + str(stages[i]) + " layers, not divisible by " +
                              str(vpp) + " virtual stages (model.num_layers " + str(num_layers) + ")");
  }
  return stages;
}

}  // namespace strata
