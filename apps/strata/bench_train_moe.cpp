// The MoE reference plumbing of `strata bench train --reference torch` (bench_train_moe.h).
#include "apps/strata/bench_train_moe.h"

#include <map>
#include <sstream>

#include "core/config_table.h"
#include "core/error.h"
#include "core/formats/safetensors.h"

namespace strata::app {
namespace {

void refuse(bool unsupported, const std::string& field, const std::string& why) {
  if (unsupported)
    throw config::ConfigError(field, "bench train --reference torch: the PyTorch MoE reference does not model " + why +
                                         "; run without --reference");
}

const char* score_name(MoeScoreFunction f) {
  return f == MoeScoreFunction::Softmax ? "softmax" : f == MoeScoreFunction::Sigmoid ? "sigmoid" : "sqrtsoftplus";
}

// The batches' [b, s] host tensors of one kind stacked into [steps, b, s].
template <typename T>
Tensor stacked(const std::vector<Tensor>& parts) {
  std::vector<T> all;
  for (const Tensor& t : parts) {
    const Tensor c = t.contiguous();
    const T* p = static_cast<const T*>(c.data_ptr());
    all.insert(all.end(), p, p + c.numel());
  }
  return Tensor::from_data(all, Shape{static_cast<int64_t>(parts.size()), parts[0].size(0), parts[0].size(1)});
}

}  // namespace

void check_moe_reference_applies(const ResolvedConfig& cfg) {
  const ResolvedModelConfig& m = cfg.model;
  if (!m->is_moe()) return;
  refuse(m->moe_router_enable_expert_bias, "model.moe_router_enable_expert_bias", "the expert bias");
  refuse(m->moe_router_group_topk.has_value() && *m->moe_router_group_topk > 0, "model.moe_router_group_topk",
         "group-limited routing");
  refuse(m->moe_expert_capacity_factor.has_value(), "model.moe_expert_capacity_factor",
         "expert capacity (token dropping)");
  refuse(m->moe_input_jitter_eps.has_value(), "model.moe_input_jitter_eps", "input jitter");
  refuse(m->moe_router_force_load_balancing, "model.moe_router_force_load_balancing", "forced load balancing");
  refuse(m->moe_router_dtype.has_value() && *m->moe_router_dtype == MoeRouterDtype::Fp64, "model.moe_router_dtype",
         "an fp64 router");
  refuse(cfg.num_micro_batches() != 1, "training.global_batch_size",
         "more than one micro-batch per step (its router losses are per micro-batch); set global_batch_size = "
         "micro_batch_size");
}

std::string moe_reference_args(const ResolvedConfig& cfg) {
  const ResolvedModelConfig& m = cfg.model;
  if (!m->is_moe()) return "";
  std::ostringstream a;
  a << " --moe-experts " << *m->num_experts << " --moe-ffn " << m.moe_ffn() << " --moe-topk " << m->moe_router_topk
    << " --moe-score " << score_name(m->moe_router_score_function) << " --moe-layers ";
  for (int64_t i = 0; i < m->num_layers; ++i) a << (i ? "," : "") << (m.is_moe_layer(i) ? 1 : 0);
  if (m->moe_router_pre_softmax) a << " --moe-pre-softmax";
  if (m->moe_router_topk_scaling_factor) a << " --moe-scaling " << *m->moe_router_topk_scaling_factor;
  for (const MoeLoadBalancingLoss& l : m->moe_load_balancing_losses()) a << " --moe-" << l.type << " " << l.coeff;
  if (m->moe_z_loss_coeff) a << " --moe-z-loss " << *m->moe_z_loss_coeff;
  if (m->moe_shared_expert_intermediate_size) a << " --moe-shared " << *m->moe_shared_expert_intermediate_size;
  if (m->moe_shared_expert_gate) a << " --moe-shared-gate";
  if (m->moe_apply_probs_on_input) a << " --moe-probs-on-input";
  return a.str();
}

void write_reference_init(const std::string& path, const std::vector<Parameter*>& params, BatchSource& source,
                          int64_t steps) {
  std::map<std::string, Tensor> tensors;
  for (const Parameter* p : params) tensors.emplace(p->name, p->value);
  std::vector<Tensor> tokens, labels, mask;
  // One micro-batch per step on one rank (run_ours refuses more): a step holds micro_batch_size samples.
  const int64_t rows = source.next_microbatch(StepPosition{}, 0).tokens.size(0);
  for (int64_t step = 1; step <= steps; ++step) {
    const Batch b = source.next_microbatch(StepPosition::constant_batch(step, rows), 0);
    tokens.push_back(b.tokens);
    labels.push_back(b.labels);
    mask.push_back(b.loss_mask);
  }
  tensors.emplace("bench.tokens", stacked<int64_t>(tokens));
  tensors.emplace("bench.labels", stacked<int64_t>(labels));
  tensors.emplace("bench.loss_mask", stacked<float>(mask));
  formats::write_safetensors(path, tensors);
}

}  // namespace strata::app
