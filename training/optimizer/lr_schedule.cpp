// Megatron-Core OptimizerParamScheduler.get_lr (see lr_schedule.h).
#include "training/optimizer/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace strata {

namespace {
LrSchedule from_config(const OptimizerConfig& cfg, const TrainingConfig& training) {
  STRATA_CHECK(cfg.lr.has_value(), "LrSchedule: optimizer.lr is not set (validate the config first)");
  STRATA_CHECK(training.train_samples ? cfg.lr_decay_samples.has_value() : cfg.lr_decay_iters.has_value(),
               "LrSchedule: the decay length is not resolved (validate the config first)");
  if (training.train_samples)
    return LrSchedule(*cfg.lr, cfg.min_lr, cfg.lr_decay_style, cfg.warmup_samples(), *cfg.lr_decay_samples,
                      cfg.lr_wsd_decay_style, cfg.lr_wsd_decay_samples.value_or(0));
  return LrSchedule(*cfg.lr, cfg.min_lr, cfg.lr_decay_style, cfg.warmup_iters(), *cfg.lr_decay_iters,
                    cfg.lr_wsd_decay_style, cfg.lr_wsd_decay_iters.value_or(0));
}
}  // namespace

LrSchedule::LrSchedule(const OptimizerConfig& cfg, const TrainingConfig& training)
    : LrSchedule(from_config(cfg, training)) {
  if (training.train_samples) steps_per_iteration_ = *training.global_batch_size;
}

LrSchedule::LrSchedule(double max_lr, double min_lr, LrDecayStyle style, int64_t warmup_iters,
                       int64_t decay_iters, WsdDecayStyle wsd_style, int64_t wsd_decay_iters,
                       double warmup_init_lr)
    : max_lr_(max_lr), min_lr_(min_lr), warmup_init_lr_(warmup_init_lr), style_(style),
      warmup_iters_(warmup_iters), decay_iters_(decay_iters), wsd_style_(wsd_style),
      wsd_decay_iters_(wsd_decay_iters) {
  STRATA_CHECK(min_lr >= 0 && max_lr >= min_lr, "LrSchedule: need 0 <= min_lr <= lr, got min_lr=", min_lr,
               " lr=", max_lr);
  STRATA_CHECK(warmup_iters >= 0, "LrSchedule: negative warmup iterations ", warmup_iters);
  STRATA_CHECK(style == LrDecayStyle::Constant || (decay_iters > 0 && decay_iters >= warmup_iters),
               "LrSchedule: lr_decay_iters (", decay_iters, ") must be positive and at least the warmup (",
               warmup_iters, ")");
  STRATA_CHECK(style != LrDecayStyle::WSD || (wsd_decay_iters > 0 && wsd_decay_iters <= decay_iters),
               "LrSchedule: WSD needs 0 < lr_wsd_decay_iters <= lr_decay_iters, got ", wsd_decay_iters);
}

LrSchedule LrSchedule::with_peak(double max_lr, double min_lr) const {
  LrSchedule s(max_lr, min_lr, style_, warmup_iters_, decay_iters_, wsd_style_, wsd_decay_iters_, warmup_init_lr_);
  s.steps_per_iteration_ = steps_per_iteration_;
  return s;
}

double LrSchedule::lr(int64_t num_steps) const {
  const double n = static_cast<double>(num_steps);
  // Warmup: init + (max - init) · n / warmup, including n == warmup (Megatron's `<=`).
  if (warmup_iters_ > 0 && num_steps <= warmup_iters_)
    return warmup_init_lr_ + (max_lr_ - warmup_init_lr_) * n / static_cast<double>(warmup_iters_);
  if (style_ == LrDecayStyle::Constant) return max_lr_;
  if (num_steps > decay_iters_) return min_lr_;

  const double decay_ratio =
      (n - static_cast<double>(warmup_iters_)) / static_cast<double>(decay_iters_ - warmup_iters_);
  const double delta = max_lr_ - min_lr_;
  double coeff = 1.0;
  switch (style_) {
    case LrDecayStyle::Linear: coeff = 1.0 - decay_ratio; break;
    case LrDecayStyle::Cosine: coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0); break;
    case LrDecayStyle::WSD: {
      const int64_t anneal_start = decay_iters_ - wsd_decay_iters_;
      if (num_steps <= anneal_start) {
        coeff = 1.0;
      } else {
        const double r = (n - static_cast<double>(anneal_start)) / static_cast<double>(wsd_decay_iters_);
        switch (wsd_style_) {
          case WsdDecayStyle::Linear: coeff = 1.0 - r; break;
          case WsdDecayStyle::Cosine: coeff = 0.5 * (std::cos(std::numbers::pi * r) + 1.0); break;
          case WsdDecayStyle::Exponential: coeff = 2.0 * std::pow(0.5, r) - 1.0; break;
          case WsdDecayStyle::MinusSqrt: coeff = 1.0 - std::sqrt(r); break;
        }
      }
      break;
    }
    case LrDecayStyle::Constant: break;
  }
  return min_lr_ + coeff * delta;
}

}  // namespace strata
