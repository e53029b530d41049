// AdamW with f32 master weights, global grad norm, clipping and NaN skip (see optimizer.h).
#include "training/optimizer/optimizer.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/phase_timer.h"
#include "kernels/reduce.h"
#include "training/optimizer/grad_buffer.h"
#include "parallel/tensor_parallel.h"

namespace strata {

namespace {
Tensor flat_f32_zeros(const Tensor& like) { return Tensor::zeros({like.numel()}, DType::F32, like.device()); }
}  // namespace

AdamWOptimizer::AdamWOptimizer(std::vector<Parameter*> params, const AdamWSettings& settings, ProcessGroup dp,
                               const GradBuffer* sharding)
    : AdamWOptimizer(settings, {OptimizerParamGroup{std::move(params), std::move(dp), sharding, {}, 0}}) {}

AdamWOptimizer::AdamWOptimizer(const AdamWSettings& settings, std::vector<OptimizerParamGroup> groups)
    : groups_(std::move(groups)), settings_(settings) {
  STRATA_CHECK(settings.clip_grad >= 0, "AdamWOptimizer: clip_grad must be >= 0, got ", settings.clip_grad);
  STRATA_CHECK(!groups_.empty(), "AdamWOptimizer: no parameter groups");
  for (const OptimizerParamGroup& g : groups_) {
    STRATA_CHECK(g.params.empty() || (g.sharding != nullptr) == (groups_.front().sharding != nullptr),
                 "AdamWOptimizer: either every parameter group is sharded (distributed optimizer) or none");
    for (Parameter* p : g.params) {
      STRATA_CHECK(p != nullptr, "AdamWOptimizer: null parameter");
      STRATA_CHECK(p->value.defined(), "AdamWOptimizer: parameter ", p->name, " has no value");
      STRATA_CHECK(p->value.is_contiguous(), "AdamWOptimizer: parameter ", p->name, " is not contiguous");
      STRATA_CHECK(p->value.dtype() == DType::F32 || p->value.dtype() == DType::BF16 || p->value.dtype() == DType::F16,
                   "AdamWOptimizer: parameter ", p->name, " has dtype ", dtype_name(p->value.dtype()),
                   " (expected f32, bf16 or f16)");
      params_.push_back(p);
    }
  }
  zero_grad();
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].sharding != nullptr) {
      build_sharded_states(g);  // distributed optimizer: states for the owned segments only
    } else {
      build_full_states(g);
    }
  }
}

void AdamWOptimizer::build_full_states(size_t group) {
  for (Parameter* p : groups_[group].params) {
    ParamState s;
    s.param = p;
    s.group = group;
    s.separate_master = p->value.dtype() != DType::F32;
    s.master = s.separate_master ? p->value.to(DType::F32).flatten().contiguous() : p->value.flatten();
    if (s.separate_master && s.master.storage() == p->value.storage()) s.master = s.master.clone();
    s.exp_avg = flat_f32_zeros(p->value);
    s.exp_avg_sq = flat_f32_zeros(p->value);
    states_.push_back(std::move(s));
  }
}

double AdamWOptimizer::reduce_over_groups(const std::vector<double>& per_group) {
  double total = 0.0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const OptimizerParamGroup& grp = groups_[g];
    Tensor t = Tensor::from_vector({per_group[g]}, {1}, DType::F64, Device::cpu());
    if (grp.sharding != nullptr && grp.dp.size() > 1) {
      const auto t0 = std::chrono::steady_clock::now();
      grp.dp.all_reduce(t, ReduceOp::Sum);
      comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    for (const ProcessGroup& n : grp.norm_groups)
      if (n.size() > 1) n.all_reduce(t, ReduceOp::Sum);
    total += t.item();
  }
  return total;
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

OptimizerStepResult AdamWOptimizer::step(double lr, std::optional<double> embedding_output_lr) {
  OptimizerStepResult r;
  if (params_.empty()) return r;
  const Device dev = params_.front()->value.device();
  std::vector<Tensor> grads;
  grads.reserve(states_.size());
  for (ParamState& s : states_) grads.push_back(s.param->main_grad.flatten().narrow(0, s.offset, s.master.numel()));

  // Global grad norm (Megatron get_grad_norm_fp32; ChainedOptimizer over the dense and expert
  // groups). Distributed optimizer: each rank's owned segments, summed over the group's dp.
  // Tensor-parallel duplicates (replicated parameters on tp ranks > 0) and shared copies (tied
  // embeddings on the last stage) are not counted; each group's sum of squares is then summed
  // over its norm groups (model parallel).
  std::vector<std::vector<size_t>> norm_grads(groups_.size());
  for (size_t i = 0; i < states_.size(); ++i) {
    const ParamState& s = states_[i];
    if (!s.param->shared_copy && tp::counts_in_grad_norm(*s.param, groups_[s.group].tp_rank))
      norm_grads[s.group].push_back(i);
  }
  {
    phase_timer::Scope t("optimizer/grad_norm");
    std::vector<double> sumsq(groups_.size(), 0.0);
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (norm_grads[g].empty()) continue;
      std::vector<Tensor> gs;
      for (size_t i : norm_grads[g]) gs.push_back(grads[i]);
      Tensor acc = Tensor::zeros({1}, DType::F64, dev);
      kernels::grad_sum_of_squares(gs, acc);
      sumsq[g] = acc.item();
    }
    r.grad_norm = std::sqrt(reduce_over_groups(sumsq));
  }

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
    std::vector<double> zeros(groups_.size(), 0.0);
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t i : norm_grads[g]) {
        kernels::count_zeros(grads[i], z);
        zeros[g] += z.item();
      }
    r.num_zeros = reduce_over_groups(zeros);
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
    cfg.lr = embedding_output_lr && s.param->vocab_rows ? *embedding_output_lr : lr;
    if (s.separate_master) {
      Tensor model_param = s.param->value.flatten().narrow(0, s.offset, s.master.numel());
      kernels::adamw_step(s.master, grads[i], s.exp_avg, s.exp_avg_sq, cfg, step_count_, wd_mult, grad_scale,
                          &model_param);
    } else {
      kernels::adamw_step(s.master, grads[i], s.exp_avg, s.exp_avg_sq, cfg, step_count_, wd_mult, grad_scale);
    }
  }
  if (distributed()) {
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
