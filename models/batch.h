// One micro-batch of a language model (Megatron's GPT batch), and its split over the ranks of a
// context-parallel group.
// Reference: megatron/training/utils.py (get_batch_on_this_cp_rank).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace strata {

// One micro-batch. Megatron's GPT batch: tokens and labels are the sample shifted by one.
struct Batch {
  Tensor tokens;     // [b, s] i64, host
  Tensor labels;     // [b, s] i64, host
  Tensor loss_mask;  // [b, s] f32, host (1 = counts towards the loss)
  // Global index (within the whole run) of sample 0 of this micro-batch: keys dropout masks, so
  // masks are identical under any data-parallel layout.
  int64_t first_sample_index = 0;
};

namespace cp {
// tokens, labels, loss_mask [b, s] -> [b, s/cp]: rank cp_rank's chunks cp_rank and 2cp−1−cp_rank
// (parallel/context_parallel.h split_sequence); first_sample_index kept.
Batch split_batch(const Batch& batch, int cp_size, int cp_rank);
}  // namespace cp

}  // namespace strata
