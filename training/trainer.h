// The training loop against the LanguageModel interface: per iteration, num_micro_batches ×
// (forward → losses → backward) accumulating into the main grads, then one optimizer step (global
// grad norm, clipping, AdamW; a NaN/Inf norm skips the step). The number of micro-batches is the
// step's global batch size (training/config/batch_size_schedule.h: constant, step schedule or
// ramp-up) / (micro_batch_size × dp); a checkpoint is saved when it grows. Megatron's log line and metric sinks
// every log_interval, validation every eval_interval, checkpoints every save_interval, on
// SIGTERM/SIGINT and at the end; resume from checkpoint.load.
// Reference: megatron/training/training.py (train, train_step, training_log, evaluate,
// save_checkpoint_and_time), megatron/core/pipeline_parallel/schedules.py.
// Details: loss normalisation training/step_losses.h; data parallelism docs/parallelism.md.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/language_model.h"
#include "training/batch_source.h"
#include "training/config/config.h"
#include "training/optimizer/loss_scaler.h"
#include "training/optimizer/lr_schedule.h"
#include "training/observability/metrics_log.h"
#include "training/observability/straggler_detector.h"
#include "training/moe_accounting.h"
#include "training/optimizer/optimizer.h"
#include "training/schedules.h"
#include "training/step_losses.h"
#include "training/optimizer/grad_buffer.h"
#include "training/observability/run_observers.h"
#include "training/checkpointing/tensor_file.h"

namespace strata {

struct CheckpointState;
class AsyncCheckpointWriter;

namespace tensor_metrics {
class TensorMetricObserver;
}

struct TrainerOptions {
  // Model FLOPs per token (forward + backward) for throughput and MFU; null: not reported.
  std::function<double()> flops_per_token;
  // Peak FLOP/s of one device for MFU; 0: MFU not reported.
  double peak_flops_per_second = 0.0;
  // Extra sinks (not owned), fed besides those made from logging.tensorboard_dir / metrics_jsonl.
  std::vector<MetricsSink*> sinks;
  // Tensor files of checkpoints; null: make_default_tensor_file_io() (safetensors) when needed.
  std::shared_ptr<TensorFileIO> tensor_io;
  // Where log lines go; null: std::cout.
  std::ostream* log_stream = nullptr;
  // Initialise the parameters from training.seed before loading (false: the caller did).
  bool init_parameters = true;
  // Pipeline parallelism: this rank's model chunks (chunks[0] must be the trainer's model), the
  // pipeline and embedding groups and the activation shape (training/schedules.h). Empty chunks:
  // the model alone, no pipelining.
  PipelineLayout pipeline;
  // The group the grad norm is summed over (tp × pp; Megatron's model-parallel group).
  ProcessGroup model_parallel = ProcessGroup::single("mp");
  // The process groups of this rank (data parallelism uses dp_cp, logging the world rank).
  ParallelGroups groups = ParallelGroups::single_process();
};

struct EvalResult {
  double loss = 0.0;  // the LM loss: mean over valid tokens
  bool counted = true;  // false when the pass counted no token (every label masked): no LM loss, not 0
  std::vector<std::pair<std::string, double>> losses;  // every per-token loss that counted a token (name, mean), LM loss first
  double ppl = 0.0;   // exp(min(20, loss)) (Megatron)
};

struct TrainResult {
  int exit_code = 0;                     // 0: done or stopped by a signal; 1: exit_on_nan
  int64_t start_iteration = 0;           // iteration loaded from the checkpoint (0: fresh)
  int64_t final_iteration = 0;
  std::vector<std::string> loss_names;   // the model's named losses (log line, JSONL, TensorBoard)
  std::vector<double> losses;            // LM loss of each iteration run by this call, in order (NaN: no token counted)
  std::vector<double> grad_norms;        // grad norm of each iteration run by this call
  std::vector<std::pair<int64_t, EvalResult>> validations;  // (iteration, result)
  int64_t skipped_iterations = 0;        // in the whole run (including before a resume)
  std::string first_non_finite_param;    // first parameter with a NaN/Inf grad (first skip)
  bool stopped_by_signal = false;
  int stop_signal = 0;
  std::vector<int64_t> saved_iterations;  // checkpoints written by this call
  double train_step_seconds = 0.0;       // wall time inside train steps (this call)
  double communication_seconds = 0.0;    // of which in data-parallel collectives
  // Gradient reduction over dp × cp (training/optimizer/grad_buffer.h): seconds it was in flight, of which
  // exposed (the rank blocked in it; with overlap_grad_reduce the rest ran under the backward),
  // and the buckets whose reduction started during a backward (overlap_grad_reduce).
  double grad_reduce_seconds = 0.0;
  double grad_reduce_exposed_seconds = 0.0;
  int64_t grad_buckets_started_early = 0;
};

// Losses come through the loss channel (models/layers/loss.h): every named loss of the model
// (LanguageModel::loss_names(), "lm loss" first) is normalised by StepLosses and logged under its
// name. Data parallelism (groups.dp_cp > 1): each rank runs its own micro-batches, the gradients
// live in a GradBuffer reduced over dp × cp after the last backward; the reported loss is the dp
// average; the log line, TensorBoard and JSONL come from the last rank (Megatron's
// print_rank_last); checkpoints are sharded (training/checkpointing/checkpoint.h).
class Trainer {
 public:
  // cfg must be validated. Initialises the parameters (unless options say otherwise), builds the
  // optimizer and loads checkpoint.load when it holds a checkpoint.
  Trainer(const ResolvedConfig& cfg, LanguageModel& model, BatchSource& train_data, BatchSource* valid_data,
          TrainerOptions options = {});
  ~Trainer();

  // Runs iterations until training.train_iters (or a stop condition: on SIGTERM/SIGINT it saves
  // a checkpoint at the next step boundary, then exits 0).
  TrainResult train();
  // One validation pass (eval_iters iterations of the validation source), the `index`-th one.
  EvalResult evaluate(int64_t index);
  // Saves a checkpoint of the current state under checkpoint.save.
  void save_checkpoint();

  int64_t iteration() const { return iteration_; }
  int64_t consumed_train_samples() const { return consumed_samples_; }
  AdamWOptimizer& optimizer() { return *optimizer_; }
  GradBuffer* grad_buffer() { return grad_buffer_.get(); }  // the dense parameters' (dp × cp)
  GradBuffer* expert_grad_buffer() { return expert_grad_buffer_.get(); }  // experts' (expert dp); null: none
  // fp16's loss scaler (null otherwise).
  const LossScaler* loss_scaler() const { return loss_scaler_ ? &*loss_scaler_ : nullptr; }
  // The run's observers (training/observability/run_observers.h): add before train().
  RunObservers& observers() { return observers_; }
  const LrSchedule& lr_schedule() const { return schedule_; }
  // The MoE accounting (null for a dense model): the last step's per-layer expert load.
  const MoeAccounting* moe_accounting() const { return moe_.get(); }

 private:
  void resume_from_checkpoint(const std::string& dir);
  // training/trainer_checkpoint.cpp: checkpoint.async_save's finalize points.
  void complete_save(const std::string& dir, int64_t iteration, std::optional<int64_t> previous,
                     std::chrono::steady_clock::time_point t0);
  void finalize_async_save();        // waits for the pending save's write and finalizes it
  void maybe_finalize_async_save();  // finalizes it when every rank's write has ended
  void resume_lr_schedule(const CheckpointState& st, const std::string& dir);
  void build_gradient_buffers_and_optimizer();
  struct StepOutcome {
    double loss = 0.0;  // the LM loss
    std::vector<std::pair<std::string, double>> losses;  // every named loss, loss_names_ order
    std::vector<bool> counted;  // per loss: false when it counted no token this step (no loss, not 0)
    int64_t tokens = 0;
    OptimizerStepResult opt;
  };
  struct Interval;  // what the log line averages (trainer_loop.cpp)
  // lr: this step's learning rate; embedding_output_lr: decoupled_lr's (null without it).
  StepOutcome train_step(double lr, std::optional<double> embedding_output_lr = std::nullopt);
  // The step about to run: its global batch size and micro-batches per rank from the schedule, and
  // Megatron's checkpoint when the number of micro-batches changes.
  void begin_step();
  // logging.profile: starts the trace before a step, writes it after the last profiled one.
  void profile_boundary(bool after_step);
  void setup_moe_accounting();
  void setup_tensor_metrics();     // logging.tensor_metrics (training/tensor_metrics/)
  void complete_tensor_metrics();  // just before the optimizer step
  LossGroups loss_groups() const;
  // The loop's parts (trainer_loop.cpp).
  bool stop_requested(TrainResult& result);
  StepOutcome timed_step(TrainResult& result, Interval& iv);
  bool account_skip(const StepOutcome& o, TrainResult& result, Interval& iv);  // true: exit_on_nan
  IterationLog iteration_log(const StepOutcome& o, const Interval& iv, double secs) const;
  void write_metrics(const IterationLog& f, const Interval& iv);
  void log_interval(const StepOutcome& o, Interval& iv);
  void warn_no_counted_tokens(const std::string& where);  // once per run, on the logging rank
  bool exceeds_consecutive_skips();                      // training.max_consecutive_skipped_iterations
  void log_summary(const TrainResult& result);
  void run_validation(TrainResult& result);
  bool exit_due(std::chrono::steady_clock::time_point run_start);
  // training.check_weight_hash_across_dp_replicas_interval: before the first step (startup) and
  // after every step whose number is a multiple of it (training/weight_hash_check.h).
  void check_weight_hashes(bool startup);
  // logging.record_memory_history: writes this rank's snapshot (core/memory_history.h).
  void dump_memory_snapshot();
  TensorFileIO& tensor_io();
  std::ostream& out();

  ResolvedConfig cfg_;
  LanguageModel& model_;
  BatchSource& train_data_;
  BatchSource* valid_data_;
  TrainerOptions options_;
  PipelineLayout pipeline_;  // chunks: {&model_} without pipelining
  std::vector<Parameter*> params_;
  std::vector<std::string> loss_names_;  // model_.loss_names(): "lm loss" first
  std::unique_ptr<GradBuffer> grad_buffer_;
  std::unique_ptr<GradBuffer> expert_grad_buffer_;
  RunObservers observers_;
  tensor_metrics::TensorMetricObserver* tensor_metrics_ = nullptr;  // owned by observers_; null: none
  std::unique_ptr<AdamWOptimizer> optimizer_;
  std::unique_ptr<MoeAccounting> moe_;     // MoE models only
  std::unique_ptr<StragglerDetector> straggler_;  // logging.log_straggler
  std::vector<Parameter*> checkpointed_;   // params_ + untrained checkpointed buffers (expert_bias)
  bool logging_rank_ = true;       // the last world rank prints and writes metrics
  double comm_seconds_ = 0.0;      // trainer-side collectives (loss, token counts)
  LrSchedule schedule_;
  std::optional<LrSchedule> decoupled_schedule_;  // optimizer.decoupled_lr: embeddings and output layer
  std::optional<LossScaler> loss_scaler_;         // fp16 (training/optimizer/loss_scaler.h)
  std::vector<std::unique_ptr<MetricsSink>> owned_sinks_;
  std::vector<MetricsSink*> sinks_;
  BatchSizeSchedule batch_sizes_ = BatchSizeSchedule::constant(1);  // each step's global batch size
  int64_t eval_micro_batches_ = 1;   // validation: training.global_batch_size's micro-batches (Megatron)
  int64_t num_micro_batches_ = 1;    // of the current step, per dp rank
  int64_t global_batch_size_ = 1;    // of the current step
  int64_t iteration_ = 0;
  int64_t start_iteration_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t scheduler_steps_ = 0;      // the lr scheduler's count: samples of the successful steps
  int64_t skipped_iterations_ = 0;
  int64_t num_evaluations_ = 0;
  int64_t last_saved_iteration_ = -1;
  int64_t consecutive_skips_ = 0;          // skipped iterations in a row, up to the last one
  bool warned_scale_at_minimum_ = false;   // fp16: the loss scale at min_loss_scale and still overflowing, once
  bool warned_no_counted_tokens_ = false;  // the warning for a step or validation without a counted token, once
  std::vector<int64_t> saved_iterations_;
  bool cleaned_save_directory_ = false;  // this run's first save cleans checkpoint.save
  // checkpoint.async_save: the pending save (declared last: its thread ends before the rest goes).
  std::optional<int64_t> async_previous_;  // the tracker's iteration when it started (save_retain_interval)
  std::chrono::steady_clock::time_point async_started_;
  std::unique_ptr<AsyncCheckpointWriter> async_writer_;
};

}  // namespace strata
