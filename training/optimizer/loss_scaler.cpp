// Megatron's constant and dynamic grad scalers (see loss_scaler.h).
#include "training/optimizer/loss_scaler.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

LossScaler LossScaler::constant(double scale) {
  STRATA_CHECK(scale > 0, "LossScaler: the scale must be positive, got ", scale);
  LossScaler s;
  s.state_.scale = scale;
  return s;
}

LossScaler LossScaler::dynamic(double initial_scale, double min_scale, int64_t growth_interval, int64_t hysteresis,
                               double growth_factor, double backoff_factor) {
  STRATA_CHECK(initial_scale > 0 && min_scale > 0 && growth_interval > 0 && hysteresis > 0 && growth_factor > 1 &&
                   backoff_factor > 0 && backoff_factor < 1,
               "LossScaler: bad dynamic scaler settings");
  LossScaler s;
  s.dynamic_ = true;
  s.min_scale_ = min_scale;
  s.growth_interval_ = growth_interval;
  s.hysteresis_ = hysteresis;
  s.growth_factor_ = growth_factor;
  s.backoff_factor_ = backoff_factor;
  s.state_ = {initial_scale, 0, hysteresis};
  return s;
}

std::optional<LossScaler> LossScaler::from_config(const TrainingConfig& t) {
  if (t.precision != Precision::Fp16) return std::nullopt;
  if (t.loss_scale) return constant(*t.loss_scale);
  return dynamic(t.initial_loss_scale.value_or(TrainingConfig::kInitialLossScale),
                 t.min_loss_scale.value_or(TrainingConfig::kMinLossScale),
                 t.loss_scale_window.value_or(TrainingConfig::kLossScaleWindow),
                 t.hysteresis.value_or(TrainingConfig::kHysteresis));
}

void LossScaler::update(bool found_inf) {
  if (!dynamic_) return;
  if (found_inf) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker -= 1;
    if (state_.hysteresis_tracker <= 0) state_.scale = std::max(state_.scale * backoff_factor_, min_scale_);
    return;
  }
  state_.growth_tracker += 1;
  if (state_.growth_tracker == growth_interval_) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker = hysteresis_;
    state_.scale *= growth_factor_;
  }
}

}  // namespace strata
