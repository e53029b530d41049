// The trainer's side of the loss channel (models/layers/loss.h) for one step or one validation pass:
// the loss function the pipeline schedule calls after each forward (it accumulates every named
// loss and returns each loss's gradient) and the reduction of the accumulated values over cp,
// pp and dp into the logged values, one per loss name, in the model's loss_names() order.
// Reference: megatron/training/training.py (train_step: losses_reduced), pretrain_gpt.py
// (loss_func), core/transformer/moe/moe_utils.py (aux-loss tracker reduction), schedules.py
// (forward_step). The normalisations are above StepLosses::on_forward; MTP's: docs/mtp.md.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/language_model.h"
#include "parallel/process_group.h"

namespace strata {

// The process groups the logged losses are reduced over.
struct LossGroups {
  ProcessGroup cp = ProcessGroup::single("cp");
  // Per-micro-batch losses (the MoE router's) are partial over tp × cp: each tp rank routes its
  // sequence-parallel shard (Megatron's MoE tracker sums them over tp × cp).
  ProcessGroup tp = ProcessGroup::single("tp");
  ProcessGroup pp = ProcessGroup::single("pp");
  ProcessGroup dp = ProcessGroup::single("dp_cp");  // dp × cp
};

class StepLosses {
 public:
  // names: every loss the model reports (LanguageModel::loss_names()); batches: this rank's
  // micro-batches of the step (its cp chunks); their valid-token counts are summed over cp (and,
  // with per_token_loss, the global count over dp × cp) here.
  StepLosses(std::vector<std::string> names, const std::vector<Batch>& batches, bool per_token_loss,
             const LossGroups& groups, Device device, double& comm_seconds);

  // The schedule's loss function for micro-batch mb: accumulates, returns one gradient per loss
  // (Megatron pretrain_gpt loss_func + schedules.forward_step):
  //  - PerToken (lm loss): by default each micro-batch's loss is the mean over its valid tokens
  //    (counted over cp), the step's the mean over micro-batches: d/dloss_i = scale · cp · mask_i /
  //    (valid tokens of its micro-batch · num_micro_batches); with calculate_per_token_loss the mean
  //    over the global batch's valid tokens: d/dloss_i = scale · mask_i / (its valid tokens).
  //  - PerToken with its own mask (MTP's mtp_k loss; Megatron process_mtp_loss + MTPLossAutoScaler),
  //    num_k its own valid tokens: d/dloss_i = scale · mask_i / (num_k · num_micro_batches), logged
  //    Σ_mb (Σ loss / num_k) / num_micro_batches; with calculate_per_token_loss d/dloss_i = scale ·
  //    mask_i · (valid tokens of the micro-batch / num_k) / (valid tokens of the global batch),
  //    logged Σ loss / Σ num_k.
  //  - PerMicroBatch (MoE auxiliary losses): the mean over micro-batches, d/dvalue = scale /
  //    num_micro_batches (Megatron's MoEAuxLossAutoScaler main_loss_backward_scale).
  std::vector<Tensor> on_forward(int64_t mb, const std::vector<NamedLoss>& losses);
  // fp16: every loss gradient on_forward returns is multiplied by this (Megatron's grad_scale_func;
  // the logged values are not).
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  // The logged value of every name (after the step; collective over cp, pp and dp): summed over cp
  // (their tokens' parts) and over pipeline stages (each stage reports its own layers' part; the LM
  // loss exists on the last stage only; entries of one name, one per MoE layer, are summed), then
  // the dp average (per-token loss: global sum / global count).
  std::vector<std::pair<std::string, double>> reduce();
  // After reduce(), per name: false where a per-token loss counted no token in the whole step (every
  // label masked): its value is then no loss, not 0, and is not reported (Megatron divides by zero).
  const std::vector<bool>& counted() const { return counted_; }
  double global_valid_tokens() const { return global_valid_; }

 private:
  size_t index_of(const std::string& name) const;
  // The gradient of a per-token loss with its own mask (NamedLoss::mask: MTP), accumulating it.
  Tensor own_mask_grad(int64_t mb, size_t k, const NamedLoss& l);

  std::vector<std::string> names_;
  const std::vector<Batch>& batches_;
  bool per_token_;
  LossGroups groups_;
  Device device_;
  double& comm_seconds_;
  std::vector<double> mb_valid_;  // per micro-batch, summed over cp
  double global_valid_ = 0.0;     // this rank's (per-token loss: over dp × cp)
  std::vector<double> sums_;      // per name
  std::vector<bool> per_token_names_;  // per name: reported as PerToken
  std::vector<double> counts_;         // per name: Σ own-mask tokens (own-mask losses)
  std::vector<bool> counted_;          // per name, after reduce()
  std::vector<bool> own_mask_names_;   // per name: reported with its own mask
  double loss_scale_ = 1.0;
};

// A validation pass: Σ loss·mask and Σ mask of every per-token loss, reduced over pp and dp × cp
// into mean losses (Megatron evaluate: "<name> validation").
class ValidationLosses {
 public:
  explicit ValidationLosses(std::vector<std::string> names) : names_(std::move(names)), sums_(names_.size(), 0.0), counts_(names_.size(), 0.0) {}
  void on_forward(const Batch& batch, const std::vector<NamedLoss>& losses);
  // (name, mean over valid tokens) of every per-token loss seen on any rank that counted a token; a
  // loss (the LM loss too) whose tokens were all masked has no value and is left out.
  std::vector<std::pair<std::string, double>> reduce(const LossGroups& groups, double& comm_seconds);

 private:
  std::vector<std::string> names_;
  std::vector<double> sums_, counts_;
};

// Σ loss_i · mask_i and Σ mask_i on the host, in index order (deterministic).
std::pair<double, double> masked_sum(const Tensor& losses, const Tensor& mask);
// Sums (or averages) a few host doubles over a group; identity for a group of one.
std::vector<double> reduce_values(const ProcessGroup& g, std::vector<double> v, ReduceOp op, double& seconds);

}  // namespace strata
