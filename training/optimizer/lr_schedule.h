// Learning-rate schedule: Megatron-Core's OptimizerParamScheduler.get_lr, counted in samples as
// Megatron counts it: the scheduler steps by each successful step's global batch size (a skipped
// step does not advance it), and iteration-based lengths are lr_*_iters × global_batch_size.
// Linear warmup from lr_warmup_init (default 0) to lr over the warmup, then constant | linear |
// cosine | inverse-square-root (lr · sqrt(max(warmup, 1) / max(n, 1)), floored at min_lr) |
// WSD (warmup-stable-decay with an exponential, linear, cosine or minus_sqrt anneal over the last
// WSD decay steps) down to min_lr at the end of the decay; min_lr after that. A warmup fraction
// gives a fractional warmup (fraction × decay steps), as in Megatron.
// Reference: megatron/core/optimizer_param_scheduler.py (get_lr, step),
// megatron/training/training.py (get_optimizer_param_scheduler, train_step's increment).
//
// Step convention (Megatron): iteration i updates the weights with lr(samples consumed by the
// successful steps before it), and the learning rate logged after iteration i is lr(after it).
#pragma once
#include <cstdint>
#include <optional>

#include "training/config/config.h"

namespace strata {

// What a checkpoint records of the schedule: Megatron's OptimizerParamScheduler.state_dict (its
// max_lr, min_lr, lr_warmup_steps, lr_decay_steps, lr_decay_style, start_wd, end_wd, wd_incr_steps,
// wd_incr_style; lengths in scheduler steps, i.e. samples) and the decoupled peak and final rates
// of the embedding and output layer (Megatron keeps them in the optimizer's param groups).
struct LrScheduleState {
  double max_lr = 0.0, min_lr = 0.0, warmup_steps = 0.0;
  int64_t decay_steps = 0;
  LrDecayStyle decay_style = LrDecayStyle::Linear;
  double start_wd = 0.0, end_wd = 0.0;
  int64_t wd_incr_steps = 1;
  WeightDecayIncrStyle wd_incr_style = WeightDecayIncrStyle::Constant;
  std::optional<double> decoupled_max_lr, decoupled_min_lr;  // optimizer.decoupled_lr runs
};

class LrSchedule {
 public:
  // The config's schedule in samples; it must be validated (lr and the decay length resolved).
  LrSchedule(const OptimizerConfig& cfg, const TrainingConfig& training);
  // Lengths in scheduler steps (samples for the config's schedule).
  LrSchedule(double max_lr, double min_lr, LrDecayStyle style, double warmup_steps, int64_t decay_steps,
             WsdDecayStyle wsd_style = WsdDecayStyle::Exponential, int64_t wsd_decay_steps = 0,
             double warmup_init_lr = 0.0);

  // Learning rate after `num_steps` scheduler steps (Megatron get_lr; for the config's schedule,
  // the samples of the successful steps so far).
  double lr(int64_t num_steps) const;

  // The same schedule between another peak and final learning rate (Megatron's per-param-group
  // max_lr / min_lr, e.g. decoupled_lr).
  LrSchedule with_peak(double max_lr, double min_lr) const;

  // The weight decay after `num_steps` scheduler steps (Megatron get_wd): end_wd past the
  // increment's steps; constant: end_wd; else start + c·(end − start), c the linear ratio or
  // ½(cos(π(1 − ratio)) + 1). The config's increment runs over the whole run, in samples.
  double weight_decay(int64_t num_steps) const;
  void set_weight_decay_increment(double start_wd, double end_wd, WeightDecayIncrStyle style, int64_t incr_steps);

  // Megatron state_dict's values (the decoupled ones are the caller's).
  LrScheduleState state() const;
  // This schedule with state's values in place of its own (Megatron load_state_dict under
  // --use-checkpoint-opt_param-scheduler); the warmup's initial rate and the WSD anneal, which
  // Megatron's state does not hold, stay this schedule's.
  LrSchedule with_state(const LrScheduleState& state) const;

  double max_lr() const { return max_lr_; }
  double min_lr() const { return min_lr_; }
  double warmup_steps() const { return warmup_steps_; }
  int64_t decay_steps() const { return decay_steps_; }

 private:
  double max_lr_, min_lr_, warmup_init_lr_;
  LrDecayStyle style_;
  double warmup_steps_;
  int64_t decay_steps_;
  WsdDecayStyle wsd_style_;
  int64_t wsd_decay_steps_;
  double start_wd_ = 0.0, end_wd_ = 0.0;
  WeightDecayIncrStyle wd_style_ = WeightDecayIncrStyle::Constant;
  int64_t wd_incr_steps_ = 1;
};

}  // namespace strata
