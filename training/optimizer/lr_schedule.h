// Learning-rate schedule: Megatron-Core's OptimizerParamScheduler.get_lr, counted in iterations,
// or in samples for sample-based training (training.train_samples: Megatron's scheduler steps by
// the global batch size and its lengths are optimizer.lr_*_samples).
// Linear warmup from lr_warmup_init (0) to lr over warmup_iters, then constant | linear | cosine |
// WSD (warmup-stable-decay with an exponential, linear, cosine or minus_sqrt anneal over the last
// lr_wsd_decay_iters) down to min_lr at lr_decay_iters; min_lr after that.
// Reference: megatron/core/optimizer_param_scheduler.py (get_lr).
//
// Step convention (Megatron): the scheduler's counter is the number of completed iterations, so
// iteration i (1-based) updates the weights with lr(i - 1), and the learning rate Megatron logs
// after iteration i is lr(i).
#pragma once
#include <cstdint>

#include "training/config/config.h"

namespace strata {

class LrSchedule {
 public:
  // The config's schedule; it must be validated (lr and the decay length resolved).
  LrSchedule(const OptimizerConfig& cfg, const TrainingConfig& training);
  LrSchedule(double max_lr, double min_lr, LrDecayStyle style, int64_t warmup_iters, int64_t decay_iters,
             WsdDecayStyle wsd_style = WsdDecayStyle::Exponential, int64_t wsd_decay_iters = 0,
             double warmup_init_lr = 0.0);

  // Learning rate after `num_steps` completed scheduler steps (Megatron get_lr).
  double lr(int64_t num_steps) const;
  // Learning rate after `iterations` completed iterations: lr(iterations) counted in iterations, or
  // lr(iterations × global batch size) counted in samples.
  double lr_after(int64_t iterations) const { return lr(iterations * steps_per_iteration_); }

  // The same schedule between another peak and final learning rate (Megatron's per-param-group
  // max_lr / min_lr, e.g. decoupled_lr).
  LrSchedule with_peak(double max_lr, double min_lr) const;

  double max_lr() const { return max_lr_; }
  double min_lr() const { return min_lr_; }
  int64_t warmup_iters() const { return warmup_iters_; }
  int64_t decay_iters() const { return decay_iters_; }

 private:
  double max_lr_, min_lr_, warmup_init_lr_;
  LrDecayStyle style_;
  int64_t warmup_iters_, decay_iters_;
  WsdDecayStyle wsd_style_;
  int64_t wsd_decay_iters_;
  int64_t steps_per_iteration_ = 1;  // 1, or the global batch size when counted in samples
};

}  // namespace strata
