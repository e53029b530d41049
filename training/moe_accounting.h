// The per-step MoE accounting of the trainer, at the end of every global batch (after the
// optimizer step, skipped steps included): the routers' tokens-per-expert counts reduced in one
// all-reduce, the aux-loss-free expert-bias update and the per-layer load statistics.
// Reference: megatron/core/distributed/finalize_model_grads.py (_update_router_expert_bias,
// reset_model_temporary_tensors), megatron/core/transformer/moe/moe_utils.py
// (get_updated_expert_bias), router.py (_update_expert_bias: counts in training forwards with grad).
// The steps: MoeAccounting::end_of_step below; the expert bias as a checkpointed, untrained
// tensor: checkpoint_tensors() (training/checkpointing/checkpoint.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/parameter.h"
#include "models/language_model.h"
#include "parallel/process_group.h"

namespace strata {

// The load of one MoE layer over one global batch (counts reduced over tp × cp × dp).
struct ExpertLoadStats {
  int64_t layer = 0;          // global layer number (0-based)
  std::vector<double> counts;  // [E] tokens per expert
  double tokens = 0;          // Σ counts: (token, expert) assignments after capacity, padding excluded
  double min = 0, max = 0, mean = 0;
  double cv = 0;              // coefficient of variation: population std / mean (0 when mean is 0)
  int64_t dead_experts = 0;   // experts that got no token
  std::vector<double> ep_rank_tokens;  // per expert-parallel rank r: Σ counts of experts [r·E/ep, (r+1)·E/ep)
  double ep_max_over_mean = 0;         // max / mean of ep_rank_tokens (1 = balanced; 0 without tokens)
};

// The statistics of one layer's counts [E] under expert_model_parallel_size ep (E % ep == 0).
ExpertLoadStats expert_load_stats(int64_t layer, const std::vector<double>& counts, int64_t ep);
// {"layer", "tokens_per_expert", "tokens", "min", "max", "mean", "cv", "dead_experts", "ep_rank_tokens",
//  "ep_max_over_mean"}.
nlohmann::json to_json(const ExpertLoadStats& s);

class MoeAccounting {
 public:
  // chunks: this rank's model chunks; num_layers: the whole model's layer count; num_experts E;
  // ep: expert_model_parallel_size; tp_dp_cp and pp: this rank's groups.
  MoeAccounting(const std::vector<LanguageModel*>& chunks, int64_t num_layers, int64_t num_experts, int64_t ep,
                ProcessGroup tp_dp_cp, ProcessGroup pp);

  // The end of a global batch (collective over tp_dp_cp and, with pp > 1, pp):
  //   1. the tokens-per-expert counts every MoE router of every local model chunk accumulated in
  //      the step's training forwards are stacked [L_local, E] and summed over tp × cp × dp in ONE
  //      all-reduce (ParallelGroups::tp_dp_cp);
  //   2. with moe_router_enable_expert_bias each router's expert_bias moves by
  //      rate · sign(mean(counts) − counts) (aux-loss-free balancing);
  //   3. the same counts give each MoE layer's load statistics, gathered over the pipeline stages
  //      (a sum over pp, each layer living on one stage) so the logging rank has every layer;
  //   4. the counts are zeroed.
  // Megatron runs 1–2 in finalize_model_grads, before optimizer.step(), so also when the step is
  // then skipped for a non-finite grad norm; the bias takes no part in the optimizer step, so
  // running it right after is the same. The expert bias is never given to the optimizer, the
  // gradient buffer, the grad norm or weight decay.
  void end_of_step();
  // The statistics of the last end_of_step(), every MoE layer of the model in layer order (on every
  // rank of the pp group).
  const std::vector<ExpertLoadStats>& last_stats() const { return stats_; }
  double communication_seconds() const { return comm_seconds_; }

 private:
  std::vector<MoeRouterRef> routers_;
  int64_t num_layers_, num_experts_, ep_;
  ProcessGroup tp_dp_cp_, pp_;
  std::vector<ExpertLoadStats> stats_;
  double comm_seconds_ = 0.0;
};

}  // namespace strata
