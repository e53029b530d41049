// The global batch size of each training step, as a function of the samples consumed before it:
// constant (training.global_batch_size), Megatron's step schedule (training.step_batch_size_schedule,
// --step-batch-size-schedule "0:16 2.4B:320 …", thresholds in tokens) or the linear ramp-up of
// training.rampup_batch_size (--rampup-batch-size START INCREMENT SAMPLES). The trainer asks it for
// each step's size; the number of micro-batches is that size / (micro_batch_size × dp).
// Reference: megatron/core/num_microbatches_calculator.py (StepBatchsizeNumMicroBatchesCalculator,
// and RampupBatchsizeNumMicroBatchesCalculator of Megatron-LM before 532ad926b4),
// megatron/training/training.py (update_train_iters).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata {

class BatchSizeSchedule {
 public:
  // (threshold in samples, global batch size) pairs, thresholds strictly increasing from 0.
  using Steps = std::vector<std::pair<int64_t, int64_t>>;

  static BatchSizeSchedule constant(int64_t global_batch_size);
  static BatchSizeSchedule steps(Steps entries);
  // From `start` up to `final_size` in steps of `increment`, each held for ramp_samples /
  // ((final_size − start) / increment) samples; final_size once more than ramp_samples are consumed.
  static BatchSizeSchedule rampup(int64_t start, int64_t increment, int64_t ramp_samples, int64_t final_size);

  // The global batch size of the step that starts after `consumed_samples` samples.
  int64_t global_batch_size(int64_t consumed_samples) const;
  // Megatron's update_train_iters: the steps that train on `train_samples` samples. A step
  // schedule counts steps until the samples are reached (the last step may pass them); the ramp-up
  // counts its ramp steps, then whole final-size batches (a partial last batch is dropped).
  int64_t iterations_for_samples(int64_t train_samples) const;
  // Samples consumed by the first `iterations` steps.
  int64_t samples_for_iterations(int64_t iterations) const;
  // Every global batch size the schedule can give, ascending.
  std::vector<int64_t> sizes() const;
  bool is_constant() const { return kind_ == Kind::Constant; }

 private:
  enum class Kind { Constant, Steps, Rampup };
  Kind kind_ = Kind::Constant;
  Steps steps_;                   // Steps; Constant: {(0, size)}
  int64_t start_ = 0, increment_ = 0, ramp_samples_ = 0, final_ = 0;  // Rampup
  double samples_per_increment_ = 0.0;                                 // Rampup
};

// Megatron's schedule string: "THRESHOLD:SIZE" entries separated by spaces or commas, each number
// with an optional K, M, B or T suffix (int(float(value) × 10^3k), as Megatron parses them).
// Thresholds are tokens, converted to samples by integer division by seq_length (Megatron passes
// its --seq-length). Sorted by threshold; the first must be 0, thresholds strictly increasing,
// sizes positive. Errors are config::ConfigError naming `field`.
// sorted = false: the entries in the order written, unchecked (step_batch_size_schedule_in_order).
BatchSizeSchedule::Steps parse_step_batch_size_schedule(const std::string& text, int64_t seq_length,
                                                        const char* field, bool sorted = true);

// The schedule's entries reordered by increasing threshold (stable), as Megatron's
// StepBatchsizeNumMicroBatchesCalculator sorts them; nullopt when they are already in order.
std::optional<std::string> step_batch_size_schedule_in_order(const std::string& text, int64_t seq_length,
                                                             const char* field);

}  // namespace strata
