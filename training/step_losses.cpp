// The trainer's side of the loss channel (see step_losses.h).
#include "training/step_losses.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace strata {

std::pair<double, double> masked_sum(const Tensor& losses, const Tensor& mask) {
  const std::vector<double> l = losses.to_vector(), m = mask.to_vector();
  STRATA_CHECK(l.size() == m.size(), "trainer: the model returned ", l.size(), " losses for a batch of ", m.size(),
               " tokens");
  double s = 0.0, n = 0.0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (m[i] != 0.0) s += l[i] * m[i];
    n += m[i];
  }
  return {s, n};
}

std::vector<double> reduce_values(const ProcessGroup& g, std::vector<double> v, ReduceOp op, double& seconds) {
  if (g.size() == 1) return v;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F64, Device::cpu());
  g.all_reduce(t, op);
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t.to_vector();
}

namespace {
Tensor scaled_mask(const Tensor& mask, double scale, Device device) {
  std::vector<double> m = mask.to_vector();
  for (double& v : m) v *= scale;
  return Tensor::from_vector(m, mask.shape(), DType::F32, device);
}
}  // namespace

StepLosses::StepLosses(std::vector<std::string> names, const std::vector<Batch>& batches, bool per_token_loss,
                       const LossGroups& groups, Device device, double& comm_seconds)
    : names_(std::move(names)),
      batches_(batches),
      per_token_(per_token_loss),
      groups_(groups),
      device_(device),
      comm_seconds_(comm_seconds),
      sums_(names_.size(), 0.0),
      per_token_names_(names_.size(), false),
      counts_(names_.size(), 0.0),
      own_mask_names_(names_.size(), false) {
  // Context parallelism: each micro-batch's token count is summed over cp.
  for (const Batch& b : batches_) {
    mb_valid_.push_back(masked_sum(b.loss_mask, b.loss_mask).second);
    global_valid_ += mb_valid_.back();
  }
  mb_valid_ = reduce_values(groups_.cp, mb_valid_, ReduceOp::Sum, comm_seconds_);
  // Megatron: with calculate_per_token_loss the token count is summed over dp × cp.
  if (per_token_) global_valid_ = reduce_values(groups_.dp, {global_valid_}, ReduceOp::Sum, comm_seconds_)[0];
}

size_t StepLosses::index_of(const std::string& name) const {
  auto it = std::find(names_.begin(), names_.end(), name);
  STRATA_CHECK(it != names_.end(), "trainer: the model reported the loss '", name,
               "', which is not in its loss_names()");
  return static_cast<size_t>(it - names_.begin());
}

std::vector<Tensor> StepLosses::on_forward(int64_t mb, const std::vector<NamedLoss>& losses) {
  const Batch& batch = batches_.at(static_cast<size_t>(mb));
  const double nmb = static_cast<double>(batches_.size());
  std::vector<Tensor> grads;
  for (const NamedLoss& l : losses) {
    const size_t k = index_of(l.name);
    if (l.reduction == LossReduction::PerMicroBatch) {
      sums_[k] += l.value.to(Device::cpu()).to_vector().at(0);
      // Megatron's MoEAuxLossAutoScaler scale: cp / micro-batches (each cp rank's router loss is
      // its part of the sequence's, and gradients are averaged over dp × cp); with per-token
      // loss the router multiplies its loss by its tokens · |tp × cp| (the micro-batch's tokens)
      // and the gradients are divided by the global token count instead.
      const double cp = static_cast<double>(groups_.cp.size());
      const double g = per_token_ ? static_cast<double>(batch.tokens.numel()) * cp / std::max(global_valid_, 1.0)
                                  : cp / nmb;
      grads.push_back(Tensor::full({1}, l.scale * g * loss_scale_, DType::F64));
      continue;
    }
    per_token_names_[k] = true;
    if (l.mask.defined()) {
      grads.push_back(own_mask_grad(mb, k, l));
      continue;
    }
    // A micro-batch without valid tokens contributes 0 (Megatron would divide by zero).
    const double sum = masked_sum(l.value, batch.loss_mask).first;
    double scale;
    if (per_token_) {
      scale = 1.0 / std::max(global_valid_, 1.0);
      sums_[k] += sum;
    } else {
      // Megatron: the loss of the whole sequence (token count summed over cp), times cp because
      // the gradients are averaged over dp × cp; this rank's share of the loss sum.
      const double seq_valid = std::max(mb_valid_[static_cast<size_t>(mb)], 1.0);
      scale = static_cast<double>(groups_.cp.size()) / (seq_valid * nmb);
      sums_[k] += sum / seq_valid;
    }
    grads.push_back(scaled_mask(batch.loss_mask, scale * l.scale * loss_scale_, device_));
  }
  return grads;
}

// A per-token loss with its own mask (MTP depth k), Megatron's process_mtp_loss: normalised by its
// own valid-token count num_k; by default sum/num_k per micro-batch, mean over micro-batches
// (MTPLossAutoScaler: 1 / micro-batches); with calculate_per_token_loss the gradient
// scale · mask · (main tokens / num_k) / global main tokens and the logged Σ loss / Σ num_k.
Tensor StepLosses::own_mask_grad(int64_t mb, size_t k, const NamedLoss& l) {
  STRATA_CHECK(groups_.cp.size() == 1, "trainer: the loss '", l.name,
               "' has its own mask, which context parallelism does not support");
  const Batch& batch = batches_.at(static_cast<size_t>(mb));
  const auto [sum, num] = masked_sum(l.value, l.mask);
  const double num_safe = std::max(num, 1.0);
  own_mask_names_[k] = true;
  double scale;
  counts_[k] += num;
  if (per_token_) {
    const double main_tokens = masked_sum(batch.loss_mask, batch.loss_mask).second;
    scale = main_tokens / num_safe / std::max(global_valid_, 1.0);
    sums_[k] += sum;
  } else {
    scale = 1.0 / (num_safe * static_cast<double>(batches_.size()));
    sums_[k] += sum / num_safe;
  }
  return scaled_mask(l.mask, scale * l.scale * loss_scale_, device_);
}

std::vector<std::pair<std::string, double>> StepLosses::reduce() {
  const double nmb = static_cast<double>(batches_.size());
  // Which names are per-token losses (a stage may not compute a loss another stage reports).
  std::vector<double> per_token_name(names_.size());
  for (size_t k = 0; k < names_.size(); ++k) per_token_name[k] = per_token_names_[k] || names_[k] == kLmLossName;
  per_token_name = reduce_values(groups_.pp, per_token_name, ReduceOp::Max, comm_seconds_);
  std::vector<double> own_mask(names_.size());
  for (size_t k = 0; k < names_.size(); ++k) own_mask[k] = own_mask_names_[k] ? 1.0 : 0.0;
  own_mask = reduce_values(groups_.pp, own_mask, ReduceOp::Max, comm_seconds_);
  double step_valid = 0.0;  // this rank's micro-batches' valid tokens (over cp)
  for (double n : mb_valid_) step_valid += n;
  std::vector<std::pair<std::string, double>> out;
  counted_.assign(names_.size(), true);
  for (size_t k = 0; k < names_.size(); ++k) {
    double v = sums_[k];
    // Per-token losses: each cp rank holds its tokens' part (with per-token loss: summed over dp × cp below).
    // Per-micro-batch losses (MoE's router losses) are partial over cp too: summed the same way.
    if (!per_token_ || per_token_name[k] == 0.0) v = reduce_values(groups_.cp, {v}, ReduceOp::Sum, comm_seconds_)[0];
    if (per_token_name[k] == 0.0) v = reduce_values(groups_.tp, {v}, ReduceOp::Sum, comm_seconds_)[0];
    // The tokens a per-token loss counted (its own mask's, or the batch's), travelling with its value
    // so that an empty denominator is known everywhere without another collective.
    const double n = own_mask[k] > 0.0 ? counts_[k] : step_valid;
    // Each pipeline stage holds its layers' part (the LM loss: the last stage; Megatron logs it there).
    std::vector<double> vn = reduce_values(groups_.pp, {v, n}, ReduceOp::Sum, comm_seconds_);
    v = vn[0];
    // The reported loss is the dp average (per-token: global sum / global count).
    double counted_tokens = 1.0;
    if (per_token_ && own_mask[k] > 0.0) {
      const std::vector<double> g = reduce_values(groups_.dp, vn, ReduceOp::Sum, comm_seconds_);
      v = g[0] / std::max(g[1], 1.0);
      counted_tokens = g[1];
    } else if (per_token_ && per_token_name[k] > 0.0) {
      v = reduce_values(groups_.dp, {v}, ReduceOp::Sum, comm_seconds_)[0] / std::max(global_valid_, 1.0);
      counted_tokens = global_valid_;
    } else if (per_token_name[k] > 0.0) {
      const std::vector<double> g = reduce_values(groups_.dp, {v / nmb, vn[1]}, ReduceOp::Avg, comm_seconds_);
      v = g[0];
      counted_tokens = g[1];
    } else {
      v = reduce_values(groups_.dp, {v / nmb}, ReduceOp::Avg, comm_seconds_)[0];
    }
    counted_[k] = counted_tokens > 0.0;
    out.push_back({names_[k], v});
  }
  return out;
}

void ValidationLosses::on_forward(const Batch& batch, const std::vector<NamedLoss>& losses) {
  for (const NamedLoss& l : losses) {
    if (l.reduction != LossReduction::PerToken) continue;
    auto it = std::find(names_.begin(), names_.end(), l.name);
    STRATA_CHECK(it != names_.end(), "evaluate: the model reported the loss '", l.name,
                 "', which is not in its loss_names()");
    const auto [s, n] = masked_sum(l.value, l.mask.defined() ? l.mask : batch.loss_mask);
    sums_[static_cast<size_t>(it - names_.begin())] += s;
    counts_[static_cast<size_t>(it - names_.begin())] += n;
  }
}

std::vector<std::pair<std::string, double>> ValidationLosses::reduce(const LossGroups& groups, double& comm_seconds) {
  std::vector<std::pair<std::string, double>> out;
  for (size_t k = 0; k < names_.size(); ++k) {
    // Computed on the stage that holds the loss (the last for the LM loss): summed over pp, then dp × cp.
    std::vector<double> v = reduce_values(groups.pp, {sums_[k], counts_[k]}, ReduceOp::Sum, comm_seconds);
    v = reduce_values(groups.dp, v, ReduceOp::Sum, comm_seconds);
    if (v[1] > 0.0) out.push_back({names_[k], v[0] / v[1]});
  }
  return out;
}

}  // namespace strata
