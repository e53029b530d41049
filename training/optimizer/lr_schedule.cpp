// Megatron-Core OptimizerParamScheduler.get_lr (see lr_schedule.h).
#include "training/optimizer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "core/error.h"

namespace strata {

namespace {
// Megatron get_optimizer_param_scheduler: sample-based lengths as they are; iteration-based ones
// times the global batch size; a warmup fraction of the decay steps, unrounded.
LrSchedule from_config(const OptimizerConfig& cfg, const TrainingConfig& training) {
  STRATA_CHECK(cfg.lr.has_value() && training.global_batch_size.has_value(),
               "LrSchedule: optimizer.lr is not set (validate the config first)");
  STRATA_CHECK(training.train_samples ? cfg.lr_decay_samples.has_value() : cfg.lr_decay_iters.has_value(),
               "LrSchedule: the decay length is not resolved (validate the config first)");
  const int64_t unit = training.train_samples ? 1 : *training.global_batch_size;
  const int64_t decay = training.train_samples ? *cfg.lr_decay_samples : *cfg.lr_decay_iters * unit;
  const int64_t warmup = training.train_samples ? cfg.lr_warmup_samples : cfg.lr_warmup_iters * unit;
  const std::optional<int64_t> wsd = training.train_samples ? cfg.lr_wsd_decay_samples : cfg.lr_wsd_decay_iters;
  const double warmup_steps =
      cfg.lr_warmup_fraction ? *cfg.lr_warmup_fraction * static_cast<double>(decay) : static_cast<double>(warmup);
  return LrSchedule(*cfg.lr, cfg.min_lr, cfg.lr_decay_style, warmup_steps, decay, cfg.lr_wsd_decay_style,
                    wsd ? *wsd * unit : 0, cfg.lr_warmup_init);
}
}  // namespace

LrSchedule::LrSchedule(const OptimizerConfig& cfg, const TrainingConfig& training)
    : LrSchedule(from_config(cfg, training)) {
  // Megatron: wd_incr_steps = train_iters × global_batch_size, or train_samples.
  const int64_t incr = training.train_samples ? *training.train_samples
                                              : training.train_iters.value_or(1) * *training.global_batch_size;
  set_weight_decay_increment(cfg.start_weight_decay.value_or(cfg.weight_decay),
                             cfg.end_weight_decay.value_or(cfg.weight_decay), cfg.weight_decay_incr_style, incr);
}

void LrSchedule::set_weight_decay_increment(double start_wd, double end_wd, WeightDecayIncrStyle style,
                                            int64_t incr_steps) {
  STRATA_CHECK(incr_steps > 0 && start_wd >= 0 && end_wd >= 0, "LrSchedule: bad weight-decay increment");
  STRATA_CHECK(style != WeightDecayIncrStyle::Constant || start_wd == end_wd,
               "LrSchedule: a constant weight decay needs start == end");
  start_wd_ = start_wd;
  end_wd_ = end_wd;
  wd_style_ = style;
  wd_incr_steps_ = incr_steps;
}

double LrSchedule::weight_decay(int64_t num_steps) const {
  if (num_steps > wd_incr_steps_ || wd_style_ == WeightDecayIncrStyle::Constant) return end_wd_;
  const double ratio = static_cast<double>(num_steps) / static_cast<double>(wd_incr_steps_);
  const double coeff =
      wd_style_ == WeightDecayIncrStyle::Linear ? ratio : 0.5 * (std::cos(std::numbers::pi * (1.0 - ratio)) + 1.0);
  return start_wd_ + coeff * (end_wd_ - start_wd_);
}

LrSchedule::LrSchedule(double max_lr, double min_lr, LrDecayStyle style, double warmup_steps, int64_t decay_steps,
                       WsdDecayStyle wsd_style, int64_t wsd_decay_steps, double warmup_init_lr)
    : max_lr_(max_lr), min_lr_(min_lr), warmup_init_lr_(warmup_init_lr), style_(style),
      warmup_steps_(warmup_steps), decay_steps_(decay_steps), wsd_style_(wsd_style),
      wsd_decay_steps_(wsd_decay_steps) {
  STRATA_CHECK(min_lr >= 0 && max_lr >= min_lr, "LrSchedule: need 0 <= min_lr <= lr, got min_lr=", min_lr,
               " lr=", max_lr);
  STRATA_CHECK(warmup_steps >= 0, "LrSchedule: negative warmup ", warmup_steps);
  STRATA_CHECK(style == LrDecayStyle::Constant ||
                   (decay_steps > 0 && static_cast<double>(decay_steps) >= warmup_steps),
               "LrSchedule: the decay (", decay_steps, " steps) must be positive and at least the warmup (",
               warmup_steps, ")");
  STRATA_CHECK(style != LrDecayStyle::WSD || (wsd_decay_steps > 0 && wsd_decay_steps <= decay_steps),
               "LrSchedule: WSD needs 0 < WSD decay steps <= decay steps, got ", wsd_decay_steps);
}

LrSchedule LrSchedule::with_peak(double max_lr, double min_lr) const {
  return LrSchedule(max_lr, min_lr, style_, warmup_steps_, decay_steps_, wsd_style_, wsd_decay_steps_,
                    warmup_init_lr_);
}

LrScheduleState LrSchedule::state() const {
  LrScheduleState s;
  s.max_lr = max_lr_;
  s.min_lr = min_lr_;
  s.warmup_steps = warmup_steps_;
  s.decay_steps = decay_steps_;
  s.decay_style = style_;
  s.start_wd = start_wd_;
  s.end_wd = end_wd_;
  s.wd_incr_steps = wd_incr_steps_;
  s.wd_incr_style = wd_style_;
  return s;
}

LrSchedule LrSchedule::with_state(const LrScheduleState& s) const {
  LrSchedule out(s.max_lr, s.min_lr, s.decay_style, s.warmup_steps, s.decay_steps, wsd_style_, wsd_decay_steps_,
                 warmup_init_lr_);
  out.set_weight_decay_increment(s.start_wd, s.end_wd, s.wd_incr_style, s.wd_incr_steps);
  return out;
}

double LrSchedule::lr(int64_t num_steps) const {
  const double n = static_cast<double>(num_steps);
  // Warmup: init + (max - init) · n / warmup, including n == warmup (Megatron's `<=`).
  if (warmup_steps_ > 0 && n <= warmup_steps_)
    return warmup_init_lr_ + (max_lr_ - warmup_init_lr_) * n / warmup_steps_;
  if (style_ == LrDecayStyle::Constant) return max_lr_;
  if (num_steps > decay_steps_) return min_lr_;
  if (style_ == LrDecayStyle::InverseSquareRoot)
    return std::max(min_lr_, max_lr_ * std::sqrt(std::max(warmup_steps_, 1.0)) / std::sqrt(std::max(n, 1.0)));

  const double decay_ratio = (n - warmup_steps_) / (static_cast<double>(decay_steps_) - warmup_steps_);
  const double delta = max_lr_ - min_lr_;
  double coeff = 1.0;
  switch (style_) {
    case LrDecayStyle::Linear: coeff = 1.0 - decay_ratio; break;
    case LrDecayStyle::Cosine: coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0); break;
    case LrDecayStyle::WSD: {
      const int64_t anneal_start = decay_steps_ - wsd_decay_steps_;
      if (num_steps <= anneal_start) {
        coeff = 1.0;
      } else {
        const double r = (n - static_cast<double>(anneal_start)) / static_cast<double>(wsd_decay_steps_);
        switch (wsd_style_) {
          case WsdDecayStyle::Linear: coeff = 1.0 - r; break;
          case WsdDecayStyle::Cosine: coeff = 0.5 * (std::cos(std::numbers::pi * r) + 1.0); break;
          case WsdDecayStyle::Exponential: coeff = 2.0 * std::pow(0.5, r) - 1.0; break;
          case WsdDecayStyle::MinusSqrt: coeff = 1.0 - std::sqrt(r); break;
        }
      }
      break;
    }
    case LrDecayStyle::Constant:
    case LrDecayStyle::InverseSquareRoot: break;
  }
  return min_lr_ + coeff * delta;
}

}  // namespace strata
