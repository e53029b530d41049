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
  // The step the micro-batch belongs to: its first sample and its global batch size (whole-run
  // counts; step_global_batch 0: unknown, the model's configured global batch). They place the
  // micro-batch's rows in the step's dropout layout under any parallel layout and any batch-size
  // schedule (training/config/batch_size_schedule.h).
  int64_t step_first_sample = 0;
  int64_t step_global_batch = 0;
  // Packed sequences (data.reset_position_ids / data.reset_attention_mask; Megatron
  // _get_ltor_masks_and_position_ids). Undefined when off. Under context parallelism both are
  // split like the tokens; their values stay positions of the whole sample.
  Tensor position_ids;    // [b, s] i64, host: each token's position within its document
  Tensor document_start;  // [b, s] i64, host: index in the sample of the first token of each
                          // token's document (a document ends with, and includes, its EOD)
  Tensor document_index;  // [b, s] i64, host: which document of its sample the token is in (0, 1, …)
  int64_t documents_per_sample = 0;  // the most documents of any sample of the (unsplit) micro-batch
};

// Sets document_start, and from it document_index and documents_per_sample (before any cp split).
void set_documents(Batch& batch, const Tensor& document_start);

// Megatron's reset rules on one sample's input tokens: a document ends after each EOD token.
// tokens [b, s] i64 -> document_start [b, s] i64 (index of each token's document's first token).
Tensor document_starts_after_eod(const Tensor& tokens, int64_t eod_token);
// document_start [b, s] -> position_ids [b, s] (t − document_start[t]).
Tensor positions_within_documents(const Tensor& document_start);

namespace cp {
// tokens, labels, loss_mask [b, s] -> [b, s/cp]: rank cp_rank's chunks cp_rank and 2cp−1−cp_rank
// (parallel/context_parallel.h split_sequence); first_sample_index kept.
Batch split_batch(const Batch& batch, int cp_size, int cp_rank);
}  // namespace cp

}  // namespace strata
