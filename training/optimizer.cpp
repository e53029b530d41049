// AdamW with f32 master weights, global grad norm, clipping and NaN skip (see optimizer.h).
#include "training/optimizer.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/phase_timer.h"
#include "kernels/reduce.h"
#include "training/grad_buffer.h"
#include "parallel/tensor_parallel.h"

namespace strata {

namespace {
Tensor flat_f32_zeros(const Tensor& like) { return Tensor::zeros({like.numel()}, DType::F32, like.device()); }
}  // namespace

AdamWOptimizer::AdamWOptimizer(std::vector<Parameter*> params, const AdamWSettings& settings, ProcessGroup dp,
                               const GradBuffer* sharding)
    : params_(params), settings_(settings), dp_(std::move(dp)), sharding_(sharding) {
  STRATA_CHECK(settings.clip_grad >= 0, "AdamWOptimizer: clip_grad must be >= 0, got ", settings.clip_grad);
  for (Parameter* p : params) {
    STRATA_CHECK(p != nullptr, "AdamWOptimizer: null parameter");
    STRATA_CHECK(p->value.defined(), "AdamWOptimizer: parameter ", p->name, " has no value");
    STRATA_CHECK(p->value.is_contiguous(), "AdamWOptimizer: parameter ", p->name, " is not contiguous");
    STRATA_CHECK(p->value.dtype() == DType::F32 || p->value.dtype() == DType::BF16 || p->value.dtype() == DType::F16,
                 "AdamWOptimizer: parameter ", p->name, " has dtype ", dtype_name(p->value.dtype()),
                 " (expected f32, bf16 or f16)");
  }
  zero_grad();
  if (sharding_ != nullptr) {  // distributed optimizer: states for the owned segments only
    build_sharded_states(params);
    return;
  }
  for (Parameter* p : params) {
    ParamState s;
    s.param = p;
    s.separate_master = p->value.dtype() != DType::F32;
    s.master = s.separate_master ? p->value.to(DType::F32).flatten().contiguous() : p->value.flatten();
    if (s.separate_master && s.master.storage() == p->value.storage()) s.master = s.master.clone();
    s.exp_avg = flat_f32_zeros(p->value);
    s.exp_avg_sq = flat_f32_zeros(p->value);
    states_.push_back(std::move(s));
  }
}

void AdamWOptimizer::zero_grad() {
  for (Parameter* pp : params_) {
    Parameter& p = *pp;
    if (!p.main_grad.defined()) {
      p.main_grad = Tensor::zeros(p.value.shape(), DType::F32, p.value.device());
    } else {
      STRATA_CHECK(p.main_grad.dtype() == DType::F32 && p.main_grad.numel() == p.value.numel() &&
                       p.main_grad.is_contiguous(),
                   "AdamWOptimizer: main_grad of ", p.name, " must be a contiguous f32 tensor of ",
                   p.value.numel(), " elements");
      p.main_grad.zero_();
    }
  }
}

void AdamWOptimizer::reset_masters_from_values() {
  for (ParamState& s : states_)
    if (s.separate_master) s.master.copy_(s.param->value.flatten().narrow(0, s.offset, s.master.numel()));
}

OptimizerStepResult AdamWOptimizer::step(double lr) {
  OptimizerStepResult r;
  if (params_.empty()) return r;
  const Device dev = params_.front()->value.device();
  std::vector<Tensor> grads;
  grads.reserve(states_.size());
  for (ParamState& s : states_) grads.push_back(s.param->main_grad.flatten().narrow(0, s.offset, s.master.numel()));

  // Global grad norm (Megatron get_grad_norm_fp32). Distributed optimizer: each rank's owned
  // segments, summed over dp. Tensor-parallel duplicates (replicated parameters on tp ranks > 0)
  // and shared copies (tied embeddings on the last stage) are not counted; the sum of squares is
  // summed over the model-parallel group.
  std::vector<Tensor> norm_grads;
  for (size_t i = 0; i < states_.size(); ++i)
    if (!states_[i].param->shared_copy && tp::counts_in_grad_norm(*states_[i].param, tp_rank_))
      norm_grads.push_back(grads[i]);
  Tensor sumsq = Tensor::zeros({1}, DType::F64, dev);
  {
    phase_timer::Scope t("optimizer/grad_norm");
    if (!norm_grads.empty()) kernels::grad_sum_of_squares(norm_grads, sumsq);
    if (distributed() && dp_.size() > 1) {
      const auto t0 = std::chrono::steady_clock::now();
      dp_.all_reduce(sumsq, ReduceOp::Sum);
      comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (mp_.size() > 1) mp_.all_reduce(sumsq, ReduceOp::Sum);
  }
  r.grad_norm = std::sqrt(sumsq.item());

  if (settings_.skip_non_finite && !std::isfinite(r.grad_norm)) {
    r.skipped = true;
    for (ParamState& s : states_) {
      if (kernels::has_non_finite(grads[static_cast<size_t>(&s - states_.data())])) {
        r.first_non_finite = s.param->name;
        break;
      }
    }
    return r;
  }

  if (settings_.count_zeros) {
    Tensor z = Tensor::zeros({1}, DType::I64, dev);
    int64_t total = 0;
    for (const Tensor& g : norm_grads) {
      kernels::count_zeros(g, z);
      total += static_cast<int64_t>(z.item());
    }
    if (distributed() || mp_.size() > 1) {
      Tensor t = Tensor::from_vector({static_cast<double>(total)}, {1}, DType::F64, Device::cpu());
      if (distributed()) dp_.all_reduce(t, ReduceOp::Sum);
      if (mp_.size() > 1) mp_.all_reduce(t, ReduceOp::Sum);
      total = static_cast<int64_t>(t.item());
    }
    r.num_zeros = static_cast<double>(total);
  }

  // Megatron clip_grad_by_total_norm_fp32: coeff = max_norm / (norm + 1e-6), applied when < 1.
  // Folded into the AdamW kernel's grad_scale instead of a separate pass over the grads.
  double grad_scale = 1.0;
  if (settings_.clip_grad > 0) {
    const double coeff = settings_.clip_grad / (r.grad_norm + 1.0e-6);
    if (coeff < 1.0) grad_scale = coeff;
  }

  ++step_count_;
  kernels::AdamWConfig cfg;
  cfg.lr = lr;
  cfg.beta1 = settings_.beta1;
  cfg.beta2 = settings_.beta2;
  cfg.eps = settings_.eps;
  cfg.weight_decay = settings_.weight_decay;
  phase_timer::Scope t("optimizer/adamw");
  for (size_t i = 0; i < states_.size(); ++i) {
    ParamState& s = states_[i];
    const double wd_mult = s.param->no_weight_decay ? 0.0 : 1.0;
    if (s.separate_master) {
      Tensor model_param = s.param->value.flatten().narrow(0, s.offset, s.master.numel());
      kernels::adamw_step(s.master, grads[i], s.exp_avg, s.exp_avg_sq, cfg, step_count_, wd_mult, grad_scale,
                          &model_param);
    } else {
      kernels::adamw_step(s.master, grads[i], s.exp_avg, s.exp_avg_sq, cfg, step_count_, wd_mult, grad_scale);
    }
  }
  if (distributed() && dp_.size() > 1) {
    const auto t0 = std::chrono::steady_clock::now();
    all_gather_parameters();
    comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return r;
}

int64_t AdamWOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const ParamState& s : states_)
    bytes += static_cast<int64_t>(s.exp_avg.nbytes() + s.exp_avg_sq.nbytes() + (s.separate_master ? s.master.nbytes() : 0));
  return bytes;
}

std::vector<ParamState>& AdamWOptimizer::checkpoint_states() {
  if (!distributed()) return states_;
  STRATA_INTERNAL_ASSERT(!checkpoint_states_.empty(),
                         "AdamWOptimizer: checkpoint states read before gather/prepare_checkpoint_states()");
  return checkpoint_states_;
}

}  // namespace strata
