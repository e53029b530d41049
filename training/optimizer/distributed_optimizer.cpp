// The distributed optimizer (ZeRO-1) parts of AdamWOptimizer (training/optimizer/optimizer.h): the owned
// segments of every parameter, the all-gather of updated parameters, and the full-size state
// assembled on every dp rank for checkpoints (the canonical global file layout; the gathered
// state is written by dp rank 0 only).
// Reference: megatron/core/optimizer/distrib_optimizer.py (_build_model_gbuf_range: a rank's range
// of each bucket intersected with each parameter; _copy_main_params_to_model_params then the
// parameter all-gather; get_parameter_state_dp_zero: gather the shards to dp rank 0 for saving).
#include <algorithm>

#include "core/error.h"
#include "training/optimizer/grad_buffer.h"
#include "training/optimizer/optimizer.h"

namespace strata {

void AdamWOptimizer::build_sharded_states(size_t group) {
  const OptimizerParamGroup& grp = groups_[group];
  const std::vector<Parameter*>& params = grp.params;
  const ProcessGroup& dp = grp.dp;
  const GradBuffer& buf = *grp.sharding;
  STRATA_CHECK(buf.distributed_optimizer(), "AdamWOptimizer: the GradBuffer was not built for the distributed optimizer");
  STRATA_CHECK(buf.num_params() == params.size(), "AdamWOptimizer: the GradBuffer holds ", buf.num_params(),
               " parameters, the optimizer ", params.size());
  STRATA_CHECK(buf.group().size() == dp.size() && buf.group().rank() == dp.rank(),
               "AdamWOptimizer: the GradBuffer's group differs from the optimizer's data-parallel group");
  for (size_t b = 0; b < buf.buckets().size(); ++b) {
    const auto [begin, end] = buf.owned_range(b);
    // Parameters in buffer order (the bucket lists them in reverse model order = increasing offset).
    for (size_t k : buf.buckets()[b].params) {
      Parameter* p = params[k];
      STRATA_CHECK(&buf.param(k) == p, "AdamWOptimizer: parameter ", p->name, " is not at the same index in the GradBuffer");
      const int64_t pbeg = buf.param_offset(k), pend = pbeg + p->value.numel();
      const int64_t lo = std::max(begin, pbeg), hi = std::min(end, pend);
      if (lo >= hi) continue;
      ParamState s;
      s.param = p;
      s.group = group;
      s.offset = lo - pbeg;
      s.separate_master = p->value.dtype() != DType::F32;
      const Tensor segment = p->value.flatten().narrow(0, s.offset, hi - lo);
      s.master = s.separate_master ? segment.to(DType::F32).contiguous() : segment;
      if (s.separate_master && s.master.storage() == p->value.storage()) s.master = s.master.clone();
      s.exp_avg = Tensor::zeros({hi - lo}, DType::F32, p->value.device());
      s.exp_avg_sq = Tensor::zeros({hi - lo}, DType::F32, p->value.device());
      states_.push_back(std::move(s));
    }
  }
}

namespace {
// One group's updated owned chunks all-gathered into every rank's parameter values.
void all_gather_group(const OptimizerParamGroup& grp) {
  const GradBuffer& buf = *grp.sharding;
  const ProcessGroup& dp = grp.dp;
  if (dp.size() == 1) return;
  for (size_t b = 0; b < buf.buckets().size(); ++b) {
    const GradBucket& bucket = buf.buckets()[b];
    const auto [begin, end] = buf.owned_range(b);
    // Pack this rank's chunk of the bucket in the parameters' dtype (padding stays zero); a bucket
    // that mixes dtypes (bf16 weights beside the f32 ones a layer keeps, e.g. Mamba's A_log and D)
    // travels in f32, which holds either exactly.
    DType dtype = buf.param(bucket.params.front()).value.dtype();
    for (size_t k : bucket.params)
      if (buf.param(k).value.dtype() != dtype) dtype = DType::F32;
    const Device device = buf.param(bucket.params.front()).value.device();
    Tensor mine = Tensor::zeros({end - begin}, dtype, device);
    for (size_t k : bucket.params) {
      Parameter& p = buf.param(k);
      const int64_t pbeg = buf.param_offset(k), pend = pbeg + p.value.numel();
      const int64_t lo = std::max(begin, pbeg), hi = std::min(end, pend);
      if (lo < hi) mine.narrow(0, lo - begin, hi - lo).copy_(p.value.flatten().narrow(0, lo - pbeg, hi - lo));
    }
    Tensor all = Tensor::empty({bucket.numel}, dtype, device);
    dp.all_gather(mine, all);
    for (size_t k : bucket.params) {
      Parameter& p = buf.param(k);
      Tensor dst = p.value.flatten();
      dst.copy_(all.narrow(0, buf.param_offset(k) - bucket.offset, p.value.numel()));
    }
  }
}
}  // namespace

void AdamWOptimizer::all_gather_parameters() {
  for (const OptimizerParamGroup& grp : groups_) all_gather_group(grp);
}

std::vector<ParamState> AdamWOptimizer::full_states(bool zeros) const {
  // One full-size state per parameter, in parameter order, filled with this rank's segments.
  std::vector<ParamState> full;
  full.reserve(params_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (Parameter* p : groups_[g].params) {
      ParamState f;
      f.param = p;
      f.group = g;
      f.separate_master = p->value.dtype() != DType::F32;
      // A non-separate master is the f32 value itself (as in the unsharded optimizer).
      f.master = f.separate_master ? Tensor::zeros({p->value.numel()}, DType::F32, p->value.device()) : p->value.flatten();
      f.exp_avg = Tensor::zeros({p->value.numel()}, DType::F32, p->value.device());
      f.exp_avg_sq = Tensor::zeros({p->value.numel()}, DType::F32, p->value.device());
      full.push_back(std::move(f));
    }
  }
  if (zeros) return full;
  for (const ParamState& s : states_) {
    const size_t k = static_cast<size_t>(std::find(params_.begin(), params_.end(), s.param) - params_.begin());
    const int64_t n = s.master.numel();
    if (s.separate_master) full[k].master.narrow(0, s.offset, n).copy_(s.master);
    full[k].exp_avg.narrow(0, s.offset, n).copy_(s.exp_avg);
    full[k].exp_avg_sq.narrow(0, s.offset, n).copy_(s.exp_avg_sq);
  }
  return full;
}

void AdamWOptimizer::gather_checkpoint_states() {
  if (!distributed()) return;
  // Every element is owned by exactly one rank and zero elsewhere, so a sum over dp assembles the
  // global tensors (exact: x + 0 = x).
  checkpoint_states_ = full_states(/*zeros=*/false);
  for (ParamState& f : checkpoint_states_) {
    const ProcessGroup& dp = groups_[f.group].dp;
    if (f.separate_master) dp.all_reduce(f.master, ReduceOp::Sum);
    dp.all_reduce(f.exp_avg, ReduceOp::Sum);
    dp.all_reduce(f.exp_avg_sq, ReduceOp::Sum);
  }
}

void AdamWOptimizer::prepare_checkpoint_states() {
  if (!distributed()) return;
  checkpoint_states_ = full_states(/*zeros=*/true);
}

void AdamWOptimizer::scatter_checkpoint_states() {
  if (!distributed()) return;
  for (ParamState& s : states_) {
    const size_t k = static_cast<size_t>(std::find(params_.begin(), params_.end(), s.param) - params_.begin());
    const ParamState& f = checkpoint_states_.at(k);
    const int64_t n = s.master.numel();
    if (s.separate_master) s.master.copy_(f.master.narrow(0, s.offset, n));
    s.exp_avg.copy_(f.exp_avg.narrow(0, s.offset, n));
    s.exp_avg_sq.copy_(f.exp_avg_sq.narrow(0, s.offset, n));
  }
  checkpoint_states_.clear();
}

}  // namespace strata
