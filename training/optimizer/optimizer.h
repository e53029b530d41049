// AdamW over a model's Parameters with Megatron-Core DistributedOptimizer semantics:
// f32 master weights (the Parameter::value itself under fp32; a separate f32 copy under bf16,
// written back to the bf16 value by every step), f32 exp_avg / exp_avg_sq, no weight decay for
// Parameter::no_weight_decay, the global gradient norm with clipping (Megatron clip_grad), the
// number of zeros in the gradients, and skipping the step when the norm is not finite.
// Reference: megatron/core/optimizer/distrib_optimizer.py, optimizer.py (MixedPrecisionOptimizer.step),
// clip_grads.py (get_grad_norm_fp32, clip_grad_by_total_norm_fp32, count_zeros_fp32).
// Data parallelism: without a distributed optimizer the gradients arrive all-reduced (GradBuffer)
// and every dp rank runs the same full update. With one (parallel.use_distributed_optimizer,
// ZeRO-1; training/optimizer/distributed_optimizer.cpp) each dp rank holds f32 masters and Adam moments
// only for the elements of the GradBuffer it owns (its chunk of every bucket): one ParamState per
// (parameter, owned segment); the grad norm and zero count are summed over the owned segments and
// all-reduced over dp; after the update every bucket's owned parameter chunk is all-gathered into
// every rank's parameter values.
#pragma once
#include <cstdint>
#include <string>
#include <optional>
#include <vector>

#include "kernels/optimizer.h"
#include "core/parameter.h"
#include "parallel/process_group.h"

namespace strata {

class GradBuffer;

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  double clip_grad = 1.0;        // 0: no clipping
  bool count_zeros = false;      // compute num-zeros (one extra pass over the grads)
  // true: a non-finite grad norm skips the step (training.check_for_nan_in_loss_and_grad).
  // false: no check, as Megatron's bf16/fp32 optimizers (no loss scaler): the step is applied
  // with the non-finite gradients (clipping as Megatron: a NaN coefficient is not < 1, so none).
  bool skip_non_finite = true;
};

struct OptimizerStepResult {
  bool skipped = false;           // grad norm not finite (and skip_non_finite): parameters untouched
  double grad_norm = 0.0;         // before clipping (Megatron reports this)
  double num_zeros = 0.0;         // zeros in the (unclipped) gradients; 0 unless counted
  std::string first_non_finite;   // name of the first parameter with a NaN/Inf gradient (skipped only)
};

// Parameters whose gradients are reduced (and, with the distributed optimizer, states sharded)
// over one data-parallel group: Megatron's dense and expert parameter groups (the members of its
// ChainedOptimizer), stepped together with one global grad norm and one clipping coefficient.
struct OptimizerParamGroup {
  std::vector<Parameter*> params;
  ProcessGroup dp = ProcessGroup::single("dp");  // dp × cp (dense) or expert dp (experts)
  const GradBuffer* sharding = nullptr;          // the group's GradBuffer (distributed optimizer)
  // The grad norm's sum of squares and the zero count of this group are summed over these groups
  // in order (after dp when sharded): dense {tp × pp}; experts {expert tp × ep, pp}.
  std::vector<ProcessGroup> norm_groups;
  int tp_rank = 0;  // replicated parameters (!tensor_parallel) count only on tp rank 0
};

// Optimizer state of one parameter. master is the f32 weight the update runs on (aliases
// Parameter::value when that is f32).
struct ParamState {
  Parameter* param = nullptr;
  int64_t offset = 0; // first element of the flattened parameter this state covers (distributed: a segment)
  Tensor master;      // [numel] f32
  Tensor exp_avg;     // [numel] f32
  Tensor exp_avg_sq;  // [numel] f32
  bool separate_master = false;  // true when value is bf16/f16 (master is its own tensor)
  size_t group = 0;              // index of its OptimizerParamGroup
};

class AdamWOptimizer {
 public:
  // params: every trainable parameter, in the model's fixed order; values must be initialised
  // (separate masters are copied from them). dp: the data-parallel group (dp × cp).
  // sharding: the GradBuffer of these parameters when it was built for the distributed optimizer
  // (the states then cover its owned ranges only); null: full states.
  AdamWOptimizer(std::vector<Parameter*> params, const AdamWSettings& settings,
                 ProcessGroup dp = ProcessGroup::single("dp"), const GradBuffer* sharding = nullptr);
  // Several parameter groups (each parameter in exactly one); all sharded or none.
  AdamWOptimizer(const AdamWSettings& settings, std::vector<OptimizerParamGroup> groups);

  // Zero every Parameter::main_grad (allocating it as f32 zeros if undefined).
  void zero_grad();
  // One step at learning rate lr over the accumulated main grads: norm, non-finite check, clip,
  // AdamW (weight_decay_mult 0 for no_weight_decay params), write back bf16 values. The step
  // counter advances only when the step is not skipped. embedding_output_lr (Megatron's
  // decoupled_lr): the learning rate of the word embeddings and the output layer
  // (Parameter::vocab_rows: Megatron's is_embedding_or_output_parameter) when set.
  OptimizerStepResult step(double lr, std::optional<double> embedding_output_lr = std::nullopt);
  // The weight decay of the next steps (Megatron's scheduler sets it each step: get_wd).
  void set_weight_decay(double weight_decay) { settings_.weight_decay = weight_decay; }
  double weight_decay() const { return settings_.weight_decay; }

  // The model-parallel group (tp × pp) the grad norm's sum of squares and the zero count are
  // summed over (Megatron get_grad_norm_fp32 over the model-parallel group); shared copies
  // (Parameter::shared_copy) are left out of both, so every parameter counts once.
  // mp: the model-parallel group (tp × pp) the grad norm and num-zeros are summed over;
  // tensor_parallel_rank: replicated parameters (!Parameter::tensor_parallel) count only on tp
  // rank 0 (Megatron param_is_not_tensor_parallel_duplicate).
  // (One-group optimizers; several groups give their norm groups in OptimizerParamGroup.)
  void set_model_parallel_group(ProcessGroup mp, int tensor_parallel_rank = 0) {
    groups_.front().norm_groups = {std::move(mp)};
    groups_.front().tp_rank = tensor_parallel_rank;
  }

  // Copy the master weights from the current Parameter values (after loading weights only).
  void reset_masters_from_values();

  // Bytes of optimizer state held by this rank: Adam moments plus separate f32 masters.
  int64_t state_bytes() const;
  bool distributed() const { return groups_.front().sharding != nullptr; }
  const std::vector<OptimizerParamGroup>& groups() const { return groups_; }

  // Checkpoint view of the state: full-size ParamStates, one per parameter, in parameter order.
  // Without sharding these are states() themselves. With sharding: gather_checkpoint_states()
  // (collective over dp) assembles them from every rank's segments; prepare_checkpoint_states()
  // allocates them (zeros) for loading, then scatter_checkpoint_states() copies this rank's
  // segments from them and releases them.
  std::vector<ParamState>& checkpoint_states();
  void gather_checkpoint_states();
  void prepare_checkpoint_states();
  void scatter_checkpoint_states();
  void release_checkpoint_states() { checkpoint_states_.clear(); }
  // Seconds spent in data-parallel collectives (norm all-reduce, parameter all-gather).
  double communication_seconds() const { return comm_seconds_; }

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }
  std::vector<ParamState>& states() { return states_; }
  const std::vector<ParamState>& states() const { return states_; }
  const AdamWSettings& settings() const { return settings_; }

 private:
  void build_full_states(size_t group);
  // Σ over groups of each group's value, each summed over its dp (when sharded) and norm groups.
  double reduce_over_groups(const std::vector<double>& per_group);
  // Distributed optimizer (distributed_optimizer.cpp).
  void build_sharded_states(size_t group);
  void all_gather_parameters();
  std::vector<ParamState> full_states(bool zeros) const;

  std::vector<OptimizerParamGroup> groups_;
  std::vector<Parameter*> params_;  // every group's, in group order
  std::vector<ParamState> states_;
  AdamWSettings settings_;
  std::vector<ParamState> checkpoint_states_;  // full-size (sharded optimizer only)
  double comm_seconds_ = 0.0;
  int64_t step_count_ = 0;
};

}  // namespace strata
