// The optimizer-sourced metric values (Megatron tensor_metrics/optimizer_sources.py):
// for every trainable parameter of this rank (shared copies left out: the owner lists them) one
// `parameter` value (its f32 master) and one `wgrad` value (its f32 main grad, finalized — reduced
// over dp — and read just before the optimizer step), named by the CanonicalParameterNameMap.
// Relations:
//   dense: TP Shard(split dim) / Replica, DpCp Replica — or, with the distributed optimizer, the
//          owned range of the flattened local parameter as FlatShard(local shape, start, end)
//          (an empty range where this rank owns none of it);
//   experts: ExpertTP instead of TP, ExpertDP instead of DpCp, and EP Owned(ep rank) when ep > 1;
//   PP Owned(stage) when pp > 1.
// `order` is the position in backward order: later pipeline stages first, and within a rank the
// reverse of the parameters' model order (the order the backward finishes them; experts of one
// layer on different EP ranks tie and are ordered by name).
#pragma once
#include <vector>

#include "models/language_model.h"
#include "models/parameter_names.h"
#include "training/optimizer/optimizer.h"
#include "training/observability/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics {

struct OptimizerSourceLayout {
  int tp = 1, expert_tp = 1, ep = 1, ep_rank = 0, pp = 1, pp_rank = 0;
};

// kind: "parameter" or "wgrad".
std::vector<MetricTensor> optimizer_values(const AdamWOptimizer& optimizer, const CanonicalParameterNameMap& names,
                                           const OptimizerSourceLayout& layout, const std::string& kind);

}  // namespace strata::tensor_metrics
