// The config's batch-size rules (StrataConfig::validate, training section), after Megatron's
// validate_args and update_train_iters: the step schedule or ramp-up against global_batch_size and
// sample-based training, train_iters from train_samples, and every size of the schedule against
// micro_batch_size × dp and the interleaved schedule. Each error is a config::ConfigError naming
// the field. Reference: megatron/training/arguments.py, training.py (update_train_iters);
// docs/schedules.md.
#pragma once
#include <cstdint>

#include "parallel/parallel_config.h"
#include "training/config/batch_size_schedule.h"
#include "training/config/config.h"

namespace strata {

// The step schedule replaces global_batch_size (Megatron refuses both), and entries out of order
// are sorted with a warning (rank 0); the ramp-up grows to it and needs sample-based training.
// default_global_batch: micro_batch_size × dp.
void check_batch_size_schedule(TrainingConfig& training, int64_t seq_length, int64_t default_global_batch);
// train_iters from train_samples under the schedule (1000 when neither is set).
void resolve_train_iters(TrainingConfig& training, const BatchSizeSchedule& schedule);
// Every size the schedule gives against micro_batch_size × dp and the interleaved pipeline schedule.
void check_batch_sizes(const TrainingConfig& training, const ParallelConfig& parallel, int64_t dp,
                       const BatchSizeSchedule& schedule);

}  // namespace strata
