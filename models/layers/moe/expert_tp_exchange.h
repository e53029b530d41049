// Expert tensor parallelism's token exchange (Megatron MoEAlltoAllTokenDispatcher with
// expert_tensor_parallel_size > 1): the ranks of one expert-tp group hold the same experts, each a
// shard (linear_fc1 split by rows, linear_fc2 by columns), and each brings its own dispatched rows.
//   gather:      every rank's rows [M_q, H] (blocks by local expert) -> all of them [ΣM, H],
//                grouped by local expert, then by expert-tp rank (an uneven all-gather, then a
//                block sort); probabilities the same way.
//   scatter_sum: partial results over all rows [ΣM, W] -> summed over the group (all-reduce), and
//                this rank's own rows [M_q, W] taken back out.
// The backward of gather is scatter_sum and vice versa. With one expert-tp rank both are identities.
// Reference: Megatron-Core transformer/moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher:
// gather_from_sequence_parallel_region over the expert-tp group after the all-to-all,
// reduce_scatter_to_sequence_parallel_region before the reverse all-to-all).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "parallel/process_group.h"

namespace strata::layers::moe {

class ExpertTpExchange {
 public:
  struct State {
    std::vector<int64_t> rows_of_rank;  // M_q per expert-tp rank
    int64_t my_offset = 0;              // first of this rank's rows in rank order
    Tensor sort_map, unsort_map;        // rank-ordered rows <-> expert-ordered rows
  };
  explicit ExpertTpExchange(ProcessGroup group) : group_(std::move(group)) {}
  int size() const { return group_.size(); }

  // rows: [M, W], rows_per_expert: [El] -> [ΣM, W]; rows_per_expert becomes the gathered blocks.
  Tensor gather_rows(const Tensor& rows, std::vector<int64_t>& rows_per_expert, State& st) const;
  // The same rows' side tensor (probabilities [M] or gradients [M, W]) with a state gather_rows made.
  Tensor gather_like(const Tensor& t, const State& st) const;
  // partial: [ΣM, W] (or [ΣM]) -> this rank's rows of the group sum: [M, W].
  Tensor scatter_sum(const Tensor& partial, const State& st) const;

 private:
  ProcessGroup group_;
};

}  // namespace strata::layers::moe
