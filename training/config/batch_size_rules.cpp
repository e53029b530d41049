// Megatron's batch-size rules of validate_args (see batch_size_rules.h).
#include "training/config/batch_size_rules.h"

#include <string>
#include <vector>

#include "core/logging.h"
#include "parallel/distributed.h"

namespace strata {

using config::ConfigError;

// Megatron's variable batch sizes: the step schedule replaces global_batch_size (Megatron refuses
// both); the ramp-up grows to it and needs sample-based training (Megatron before the step
// schedule: "expected no batch-size rampup for iteration-based training").
void check_batch_size_schedule(TrainingConfig& training, int64_t seq_length, int64_t default_global_batch) {
  if (training.step_batch_size_schedule) {
    // Megatron sorts the entries; so does Strata, saying so once (the field keeps the sorted order,
    // so a second validate() finds it in order).
    const char* field = "training.step_batch_size_schedule";
    if (auto sorted = step_batch_size_schedule_in_order(*training.step_batch_size_schedule, seq_length, field)) {
      if (launched_rank().value_or(0) == 0)
        log::warn("{} \"{}\" is not in increasing threshold order; it is used sorted, as Megatron sorts it: \"{}\"",
                  field, *training.step_batch_size_schedule, *sorted);
      training.step_batch_size_schedule = *sorted;
    }
    if (!training.rampup_batch_size.empty())
      throw ConfigError("training.rampup_batch_size", "set together with training.step_batch_size_schedule; choose one");
    if (training.global_batch_size && *training.global_batch_size != default_global_batch)
      throw ConfigError("training.step_batch_size_schedule",
                        "cannot be set together with training.global_batch_size (Megatron: \"Cannot specify both "
                        "--step-batch-size-schedule and --global-batch-size\"); the schedule gives every step's size");
  }
  if (training.rampup_batch_size.empty()) return;
  const std::vector<int64_t>& r = training.rampup_batch_size;
  const char* field = "training.rampup_batch_size";
  if (r.size() != 3) throw ConfigError(field, "takes three numbers: START INCREMENT SAMPLES");
  if (r[0] <= 0 || r[1] <= 0 || r[2] <= 0)
    throw ConfigError(field, "START, INCREMENT and SAMPLES must be positive, got " + std::to_string(r[0]) + " " + std::to_string(r[1]) +
                                 " " + std::to_string(r[2]));
  if (!training.train_samples)
    throw ConfigError(field, "needs sample-based training (training.train_samples), as in Megatron");
  const int64_t final_size = training.global_batch_size.value_or(default_global_batch);
  if (final_size <= r[0] || (final_size - r[0]) % r[1] != 0)
    throw ConfigError(field, "ramps from " + std::to_string(r[0]) + " to training.global_batch_size " + std::to_string(final_size) +
                                 ": the difference must be a positive multiple of the increment " + std::to_string(r[1]));
}

// Iteration- or sample-based length (Megatron validate_args and update_train_iters):
// train_iters = the steps that consume train_samples under the batch-size schedule.
void resolve_train_iters(TrainingConfig& training, const BatchSizeSchedule& schedule) {
  if (!training.train_samples) {
    if (!training.train_iters) training.train_iters = 1000;
    return;
  }
  const int64_t iters = schedule.iterations_for_samples(*training.train_samples);
  if (training.train_iters && *training.train_iters != iters)  // (validate() may run twice: the derived value is fine)
    throw ConfigError("training.train_iters", "set together with training.train_samples; choose iteration- or "
                                              "sample-based training, not both");
  if (iters < 1)
    throw ConfigError("training.train_samples", std::to_string(*training.train_samples) + " is less than one global batch (" +
                                                    std::to_string(schedule.global_batch_size(0)) + " samples)");
  training.train_iters = iters;
}

// Every batch size the schedule gives against micro_batch_size × dp and the interleaved schedule
// (Megatron checks the current one each step; Strata checks them all before allocating).
void check_batch_sizes(const TrainingConfig& training, const ParallelConfig& parallel, int64_t dp,
                       const BatchSizeSchedule& schedule) {
  const int64_t mbs = training.micro_batch_size;
  const char* field = training.step_batch_size_schedule ? "training.step_batch_size_schedule"
                      : training.rampup_batch_size.empty() ? "training.global_batch_size"
                                                           : "training.rampup_batch_size";
  for (const int64_t size : schedule.sizes()) {
    if (size % (mbs * dp) != 0)
      throw ConfigError(field, std::to_string(size) + (schedule.is_constant() ? "" : " (a global batch size of the schedule)") +
                                   " is not divisible by training.micro_batch_size (" + std::to_string(mbs) +
                                   ") x data-parallel size (" + std::to_string(dp) + ")");
    // Megatron validate_args: the interleaved schedule runs micro-batches in groups of pp.
    if (parallel.virtual_pipeline_model_parallel_size && (size / (mbs * dp)) % parallel.pipeline_model_parallel_size != 0)
      throw ConfigError("parallel.virtual_pipeline_model_parallel_size",
                        "the interleaved schedule needs the number of micro-batches (" + std::to_string(size / (mbs * dp)) +
                            ", of the global batch size " + std::to_string(size) +
                            ") to be divisible by parallel.pipeline_model_parallel_size (" +
                            std::to_string(parallel.pipeline_model_parallel_size) + ")");
  }
}

}  // namespace strata
