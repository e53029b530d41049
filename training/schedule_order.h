// The order in which one pipeline rank runs the forward and backward passes of a step's
// micro-batches under Megatron-Core's schedules, as pure functions (no communication): the
// non-interleaved 1F1B schedule (warm-up pp − rank − 1 forwards, steady one-forward-one-backward,
// cool-down backwards) and the interleaved (virtual pipeline) schedule with its micro-batch →
// model-chunk mapping. training/schedules.cpp executes exactly these orders; tests check them
// against hand-written tables.
// Reference: megatron/core/pipeline_parallel/schedules.py
// (forward_backward_pipelining_without_interleaving, forward_backward_pipelining_with_interleaving:
// get_model_chunk_id, get_microbatch_id_in_model_chunk, num_warmup_microbatches).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct PipelineOp {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  int64_t micro_batch = 0;  // index within the step
  int64_t chunk = 0;        // model chunk (virtual stage) on this rank; 0 without interleaving
  bool operator==(const PipelineOp& o) const {
    return kind == o.kind && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

// "F3" / "B0" (chunk 0), "F3.1" (micro-batch 3 of chunk 1): compact text for tests and logs.
std::string to_string(const PipelineOp& op);
std::string to_string(const std::vector<PipelineOp>& ops);

// Interleaved schedule: the model chunk of the k-th forward (or backward) pass of a rank
// (Megatron get_model_chunk_id: groups of pp virtual micro-batches per chunk, backward reversed).
int64_t interleaved_chunk_id(int64_t k, int64_t pp, int64_t vpp, bool forward);
// Interleaved schedule: the micro-batch of the k-th virtual micro-batch (Megatron
// get_microbatch_id_in_model_chunk).
int64_t interleaved_micro_batch_id(int64_t k, int64_t pp, int64_t vpp);

// Number of warm-up forward passes of `rank` (before the first backward):
// vpp == 1: min(pp − rank − 1, m); interleaved: m·vpp when m == pp, else
// min(2·(pp − rank − 1) + (vpp − 1)·pp, m·vpp).
int64_t num_warmup_micro_batches(int64_t pp, int64_t rank, int64_t vpp, int64_t num_micro_batches);

// The sequence of passes rank `rank` of a pp-stage pipeline runs for one step of
// num_micro_batches micro-batches with vpp model chunks per rank (vpp == 1: 1F1B without
// interleaving; pp == 1: forward then backward of each micro-batch in turn). Interleaving needs
// num_micro_batches % pp == 0 (Megatron's rule); violations throw naming the arguments.
std::vector<PipelineOp> pipeline_schedule_order(int64_t pp, int64_t rank, int64_t vpp, int64_t num_micro_batches);

// The pipeline bubble fraction of the schedule: (pp − 1) / (vpp · m).
double pipeline_bubble_fraction(int64_t pp, int64_t vpp, int64_t num_micro_batches);

}  // namespace strata
