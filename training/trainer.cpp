// The single-process training loop (see trainer.h).
#include "training/trainer.h"

#include "core/memory_history.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <ostream>
#include <streambuf>
#include <tuple>

#include "core/allocator.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/phase_timer.h"
#include "models/config/mtp_config.h"
#include "training/observability/tensor_metrics/metric_observer.h"
#include "training/observability/tensor_metrics/registry.h"
#include "parallel/context_parallel.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_architecture.h"
#include "training/checkpointing/checkpoint_directory.h"
#include "training/checkpointing/checkpoint_save.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/observability/router_tracer.h"
#include "training/signals.h"
#include "training/step_losses.h"

namespace strata {

namespace {
// Megatron's StrictHandling as Strata's two mismatch kinds: (this model's tensors the checkpoint
// lacks, the checkpoint's tensors this model lacks). null: both are errors.
std::pair<CheckpointLoadOptions::Mismatch, CheckpointLoadOptions::Mismatch> mismatch_handling(
    const std::optional<DistCkptStrictness>& s) {
  using M = CheckpointLoadOptions::Mismatch;
  using S = DistCkptStrictness;
  if (!s) return {M::Error, M::Error};
  switch (*s) {
    case S::AssumeOkUnexpected:
    case S::RaiseUnexpected: return {M::Error, M::Ignore};
    case S::RaiseAll: return {M::Error, M::Error};
    case S::LogUnexpected: return {M::List, M::Ignore};
    case S::LogAll: return {M::List, M::List};
    case S::ReturnUnexpected:
    case S::ReturnAll:
    case S::IgnoreAll: return {M::Ignore, M::Ignore};
  }
  return {M::Error, M::Error};
}
using Clock = std::chrono::steady_clock;

// Where non-logging ranks print: nowhere.
struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c; }
};
std::ostream& null_stream() {
  static NullBuffer buf;
  static std::ostream os(&buf);
  return os;
}

// Megatron DDP's grad dtype: bf16 with grad_reduce_in_bf16, the fp16 params' dtype under fp16
// (unless accumulate_allreduce_grads_in_fp32), else f32.
DType main_grad_dtype(const TrainingConfig& t) {
  if (t.grad_reduce_in_bf16) return DType::BF16;
  if (t.precision == Precision::Fp16 && !t.accumulate_allreduce_grads_in_fp32) return DType::F16;
  return DType::F32;
}

AdamWSettings adam_settings(const ResolvedConfig& cfg) {
  AdamWSettings s;
  s.beta1 = cfg.optimizer->adam_beta1;
  s.beta2 = cfg.optimizer->adam_beta2;
  s.eps = cfg.optimizer->adam_eps;
  s.weight_decay = cfg.optimizer->weight_decay;
  s.clip_grad = cfg.optimizer->clip_grad;
  s.count_zeros = cfg.logging->log_num_zeros_in_grad;
  // fp16: Megatron's mixed-precision optimizer always skips a step with Inf/NaN gradients.
  s.skip_non_finite = cfg.training->check_for_nan_in_loss_and_grad || cfg.training->precision == Precision::Fp16;
  return s;
}
}  // namespace

Trainer::Trainer(const ResolvedConfig& cfg, LanguageModel& model, BatchSource& train_data, BatchSource* valid_data,
                 TrainerOptions options)
    : cfg_(cfg), model_(model), train_data_(train_data), valid_data_(valid_data), options_(std::move(options)),
      schedule_(cfg.optimizer, cfg.training) {
  if (cfg.optimizer->decoupled_lr)
    decoupled_schedule_ = schedule_.with_peak(*cfg.optimizer->decoupled_lr,
                                              cfg.optimizer->decoupled_min_lr.value_or(cfg.optimizer->min_lr));
  STRATA_CHECK(cfg_.training->global_batch_size.has_value(), "trainer: the config is not validated");
  batch_sizes_ = cfg_.batch_size_schedule();
  loss_scaler_ = LossScaler::from_config(cfg_.training);
  eval_micro_batches_ = cfg_.num_micro_batches();
  pipeline_ = options_.pipeline;
  if (pipeline_.chunks.empty()) pipeline_.chunks = {&model_};
  STRATA_CHECK(pipeline_.chunks.front() == &model_, "trainer: TrainerOptions.pipeline.chunks[0] must be the model");
  if (pipeline_.pp.size() == 1)
    for (LanguageModel* chunk : pipeline_.chunks)
      STRATA_CHECK(chunk->is_first_stage() && chunk->is_last_stage(),
                   "trainer: the model is a pipeline stage; set TrainerOptions.pipeline (training/pipeline_setup.h)");
  for (LanguageModel* chunk : pipeline_.chunks) {
    for (Parameter* p : chunk->parameters()) params_.push_back(p);
    if (options_.init_parameters) chunk->init_parameters(static_cast<uint64_t>(cfg_.training->seed));
  }
  STRATA_CHECK(!params_.empty(), "trainer: the model has no parameters");
  setup_moe_accounting();  // MoE: per-step token counts and expert bias (training/moe_accounting.h)
  loss_names_ = model_.loss_names();
  STRATA_CHECK(!loss_names_.empty() && loss_names_.front() == kLmLossName, "trainer: the model's first loss must be '",
               kLmLossName, "'");
  build_gradient_buffers_and_optimizer();
  logging_rank_ = options_.groups.global_rank == options_.groups.world_size - 1;

  if (logging_rank_) {
    if (cfg_.logging->tensorboard_dir)
      if (auto s = make_tensorboard_sink(*cfg_.logging->tensorboard_dir)) owned_sinks_.push_back(std::move(s));
    if (cfg_.logging->metrics_jsonl) owned_sinks_.push_back(make_jsonl_sink(*cfg_.logging->metrics_jsonl));
    for (auto& s : owned_sinks_) sinks_.push_back(s.get());
    for (MetricsSink* s : options_.sinks) sinks_.push_back(s);
  }
  if (memory_history_rank(cfg_.logging, options_.groups.global_rank) && !memory_history::recording())
    memory_history::start(params_.front()->value.device());
  if (cfg_.logging->log_straggler)
    straggler_ = std::make_unique<StragglerDetector>(options_.groups.world, cfg_.logging->straggler_minmax_count,
                                                     !cfg_.logging->disable_straggler_on_startup,
                                                     cfg_.logging->straggler_ctrlr_port);

  if (cfg_.checkpoint->load) resume_from_checkpoint(*cfg_.checkpoint->load);
  // logging.moe_routing_trace_path: the router tracer over every chunk's routers (training/observability/router_tracer.h).
  if (auto tracer = make_router_tracer(cfg_, pipeline_.chunks, options_.groups.global_rank,
                                         options_.groups.ep.rank(), options_.groups.ep.size()))
    observers_.add(std::move(tracer));
  setup_tensor_metrics();
}

// checkpoint.load: the weights, optimizer, counters and schedule of its latest checkpoint (a warning
// and a fresh start when it holds none).
void Trainer::resume_from_checkpoint(const std::string& dir) {
  if (!read_checkpoint_tracker(dir)) {
    log::warn("checkpoint.load={}: no {} found, training from scratch", dir, kTrackerFile);
    return;
  }
  const int64_t at = *read_checkpoint_tracker(dir);
  for (const std::string& d : check_checkpoint_architecture(dir, at, cfg_))  // a finetune's differences
    log::warn("checkpoint.finetune: {}", d);
  CheckpointLoadOptions lo;
  lo.load_optimizer = !cfg_.checkpoint->no_load_optim;
  lo.load_rng = !cfg_.checkpoint->no_load_rng;
  lo.finetune = cfg_.checkpoint->finetune;
  std::tie(lo.absent_from_checkpoint, lo.absent_from_model) = mismatch_handling(cfg_.checkpoint->dist_ckpt_strictness);
  lo.holds_whole_model = pipeline_.pp.size() == 1 && options_.groups.ep.size() == 1;
  // Distributed optimizer: the state is read at full size, then this rank keeps its segments.
  const bool reads_optimizer = lo.load_optimizer && !lo.finetune;
  if (reads_optimizer) optimizer_->prepare_checkpoint_states();
  const CheckpointState st = load_checkpoint(dir, checkpointed_, optimizer_.get(), tensor_io(), lo);
  if (reads_optimizer) optimizer_->scatter_checkpoint_states();
  const char* why = lo.finetune ? "checkpoint.finetune" : "checkpoint.dist_ckpt_strictness";
  for (const std::string& n : st.finetune_missing)
    log::warn("{}: {} is not in the checkpoint; it keeps its initialisation", why, n);
  for (const std::string& n : st.finetune_unused)
    log::warn("{}: the checkpoint's {} is not in this model; not loaded", why, n);
  iteration_ = start_iteration_ = st.iteration;
  consumed_samples_ = st.consumed_train_samples;
  // Checkpoints from before the scheduler count was saved: every iteration at the config's size.
  scheduler_steps_ = st.lr_scheduler_steps.value_or(st.iteration * *cfg_.training->global_batch_size);
  resume_lr_schedule(st, dir);
  skipped_iterations_ = st.num_skipped_iterations;
  if (loss_scaler_ && st.loss_scaler && lo.load_optimizer && !lo.finetune) loss_scaler_->load(*st.loss_scaler);
  num_evaluations_ = st.num_evaluations;
  if (lo.load_rng && !lo.finetune && st.seed != static_cast<uint64_t>(cfg_.training->seed))
    log::warn("checkpoint {} was written with seed {}, this run uses training.seed={}", dir, st.seed,
              cfg_.training->seed);
  out() << " loaded checkpoint from " << dir << " at iteration " << st.iteration
        << (lo.finetune ? " (finetune: weights only, starting at iteration 0)" : "") << std::endl;
}

// The schedule a resume continues (training/checkpointing/checkpoint_scheduler.h): the config's, or
// the checkpoint's under checkpoint.use_checkpoint_opt_param_scheduler; a difference without either
// flag is refused. Under checkpoint.override_opt_param_scheduler the scheduler's position is the
// consumed samples, as Megatron's load_checkpoint resets num_steps.
void Trainer::resume_lr_schedule(const CheckpointState& st, const std::string& dir) {
  if (!resume_loads_lr_schedule(cfg_)) return;
  const std::string where = "'" + dir + "' (iteration " + std::to_string(st.iteration) + ")";
  const LrScheduleState s = resolve_resume_lr_schedule(st.lr_schedule, cfg_, where);
  if (cfg_.checkpoint->use_checkpoint_opt_param_scheduler) {
    schedule_ = schedule_.with_state(s);
    decoupled_schedule_.reset();
    if (s.decoupled_max_lr)
      decoupled_schedule_ = schedule_.with_peak(*s.decoupled_max_lr, s.decoupled_min_lr.value_or(s.min_lr));
    log::info("checkpoint.use_checkpoint_opt_param_scheduler: the checkpoint's schedule (lr {}, min_lr {}, warmup "
              "{} and decay {} samples)",
              s.max_lr, s.min_lr, s.warmup_steps, s.decay_steps);
  }
  if (cfg_.checkpoint->override_opt_param_scheduler && scheduler_steps_ != consumed_samples_) {
    log::warn("checkpoint.override_opt_param_scheduler: the scheduler's count ({} samples) differs from the "
              "consumed samples ({}); continuing from the consumed samples, as Megatron does",
              scheduler_steps_, consumed_samples_);
    scheduler_steps_ = consumed_samples_;
  }
}

// logging.tensor_metrics: the forward sites through the run's observers, the optimizer's values
// just before each step (training/observability/tensor_metrics/metric_observer.h).
void Trainer::setup_tensor_metrics() {
  using namespace tensor_metrics;
  if (cfg_.logging->tensor_metrics.empty()) return;
  const ParallelGroups& g = options_.groups;
  const ForwardLayout fwd{g.tp.size(), g.cp.size(), g.dp.size(), pipeline_.pp.size(), pipeline_.pp.rank(),
                          cfg_.parallel->sequence_parallel};
  const OptimizerSourceLayout opt{g.tp.size(), g.expert_tp.size(), g.ep.size(), g.ep.rank(),
                                  pipeline_.pp.size(), pipeline_.pp.rank()};
  AxisGroups axes = AxisGroups::from(g);
  axes.bind(Axis::PP, pipeline_.pp);
  const std::vector<MetricFactory>& factories = tensor_metric_factories();
  auto observer = std::make_unique<TensorMetricObserver>(
      parse_tensor_metric_specs(cfg_.logging->tensor_metrics, factories), factories,
      std::make_unique<ProcessGroupRunner>(std::move(axes)), fwd, opt, pipeline_.chunks);
  tensor_metrics_ = observer.get();
  observers_.add(std::move(observer));
}

void Trainer::complete_tensor_metrics() {
  if (!tensor_metrics_) return;
  const tensor_metrics::TensorMetricReport report = tensor_metrics_->complete(iteration_, *optimizer_);
  if (logging_rank_) tensor_metrics::publish(report, sinks_, &out());
}

// Megatron DDP: one gradient buffer over dp × cp for the dense parameters and, when this stage has
// experts, one over the expert-data-parallel group for theirs (Parameter::expert_parallel), scaled
// by 1 / |dp × cp| before the sum (an expert's gradient already holds its whole expert-parallel
// group's tokens); the optimizer steps both groups with one grad norm (Megatron ChainedOptimizer).
void Trainer::build_gradient_buffers_and_optimizer() {
  const ParallelGroups& g = options_.groups;
  std::vector<Parameter*> dense, experts;
  for (Parameter* p : params_) (p->expert_parallel ? experts : dense).push_back(p);
  GradBufferOptions gbo;
  gbo.distributed_optimizer = cfg_.parallel->use_distributed_optimizer;
  gbo.reduce_dtype = main_grad_dtype(cfg_.training);
  gbo.bucket_size =
      default_ddp_bucket_size(cfg_.parallel->ddp_bucket_size, cfg_.parallel->overlap_grad_reduce, g.dp_cp.size());
  GradBufferOptions ebo = gbo;
  if (pipeline_.embedding.size() > 1)  // tied embeddings across stages: a bucket of their own (grad_buffer.h)
    for (LanguageModel* chunk : pipeline_.chunks)
      for (Parameter* p : chunk->embedding_group_parameters()) gbo.own_bucket.push_back(p);
  grad_buffer_ = std::make_unique<GradBuffer>(dense, g.dp_cp, gbo);
  std::vector<OptimizerParamGroup> groups(1);
  groups[0] = {dense, g.dp_cp, gbo.distributed_optimizer ? grad_buffer_.get() : nullptr, {options_.model_parallel},
               g.tp.rank()};
  if (!experts.empty()) {
    ebo.bucket_size = default_ddp_bucket_size(cfg_.parallel->ddp_bucket_size, cfg_.parallel->overlap_grad_reduce,
                                              g.expert_dp.size());
    if (!cfg_.training->calculate_per_token_loss) ebo.gradient_scale = 1.0 / static_cast<double>(g.dp_cp.size());
    expert_grad_buffer_ = std::make_unique<GradBuffer>(experts, g.expert_dp, ebo);
    groups.push_back({experts, g.expert_dp, ebo.distributed_optimizer ? expert_grad_buffer_.get() : nullptr,
                      {g.tp_ep, g.pp}, g.expert_tp.rank()});
  } else if (cfg_.model->is_moe()) {
    // A stage without MoE layers (a hybrid stage of '*'/'-' layers, a dense layer of moe_layer_freq)
    // still joins the expert group's norm reduction over pp, with nothing to add.
    groups.push_back({{}, g.expert_dp, nullptr, {g.tp_ep, g.pp}, g.expert_tp.rank()});
  }
  optimizer_ = std::make_unique<AdamWOptimizer>(adam_settings(cfg_), std::move(groups));
}

Trainer::~Trainer() = default;

void Trainer::setup_moe_accounting() {
  checkpointed_ = checkpoint_tensors(pipeline_.chunks);  // the parameters, then the routers' expert biases
  if (!cfg_.model->is_moe()) return;
  moe_ = std::make_unique<MoeAccounting>(pipeline_.chunks, num_layers_with_mtp(cfg_.model), *cfg_.model->num_experts,
                                         cfg_.parallel->expert_model_parallel_size, options_.groups.tp_dp_cp,
                                         pipeline_.pp);
}

std::ostream& Trainer::out() {
  if (!logging_rank_) return null_stream();
  return options_.log_stream ? *options_.log_stream : std::cout;
}

TensorFileIO& Trainer::tensor_io() {
  if (!options_.tensor_io) options_.tensor_io = make_default_tensor_file_io();
  return *options_.tensor_io;
}

LossGroups Trainer::loss_groups() const {
  LossGroups g;
  g.cp = options_.groups.cp;
  g.tp = options_.groups.tp;
  g.pp = pipeline_.pp;
  g.dp = options_.groups.dp_cp;
  return g;
}

Trainer::StepOutcome Trainer::train_step(double lr, std::optional<double> embedding_output_lr) {
  StepOutcome o;
  const StepPosition at{iteration_ + 1, consumed_samples_, global_batch_size_};
  // The run's observers (training/observability/run_observers.h) for this iteration (0-based, as Megatron's tracer).
  RunObservers::Step observed(observers_, ObservationContext{iteration_, 0, 0, ObservationPhase::Train});
  {
    phase_timer::Scope t("zero_grad");
    grad_buffer_->zero();  // every main_grad (views into the buffers)
    if (expert_grad_buffer_) expert_grad_buffer_->zero();
  }
  const Device device = params_.front()->value.device();
  const int64_t step = iteration_ + 1;
  const ProcessGroup& dp = options_.groups.dp_cp;

  // The valid-token counts are needed before the first backward; batches are small host tensors.
  // Context parallelism (Megatron get_batch_on_this_cp_rank): every cp rank reads the same
  // micro-batch and keeps its two sequence chunks.
  std::vector<Batch> batches;
  batches.reserve(static_cast<size_t>(num_micro_batches_));
  const ProcessGroup& cpg = options_.groups.cp;
  for (int64_t mb = 0; mb < num_micro_batches_; ++mb)
    batches.push_back(cp::split_batch(train_data_.next_microbatch(at, mb), cpg.size(), cpg.rank()));
  StepLosses losses(loss_names_, batches, cfg_.training->calculate_per_token_loss, loss_groups(), device, comm_seconds_);
  if (loss_scaler_) losses.set_loss_scale(loss_scaler_->scale());  // fp16: the backward starts scaled

  // The loss function runs after every forward that reports losses (training/step_losses.h); the
  // schedule is the layout's (training/schedules.h).
  ScheduleStep sched;
  sched.step = step;
  sched.num_micro_batches = num_micro_batches_;
  sched.batch = [&](int64_t mb) -> const Batch& { return batches[static_cast<size_t>(mb)]; };
  sched.loss_func = [&](int64_t mb, const std::vector<NamedLoss>& l) { return losses.on_forward(mb, l); };
  // Overlapped gradient reduction (parallel.overlap_grad_reduce, Megatron DDP's grad hooks): the
  // last micro-batch's backward reports each parameter as it finishes it, and a bucket starts its
  // asynchronous reduction once all its parameters are reported (training/optimizer/grad_buffer.h).
  grad_buffer_->set_reduce_op(cfg_.training->calculate_per_token_loss ? ReduceOp::Sum : ReduceOp::Avg);
  if (expert_grad_buffer_) expert_grad_buffer_->set_reduce_op(ReduceOp::Sum);  // scaled by 1 / |dp × cp| first
  if (cfg_.parallel->overlap_grad_reduce) {
    sched.grad_ready = [this](const std::vector<Parameter*>& ps) {
      for (const Parameter* p : ps) {
        if (expert_grad_buffer_ && expert_grad_buffer_->holds(p)) {
          expert_grad_buffer_->register_grad_ready(p);
        } else {
          grad_buffer_->register_grad_ready(p);
        }
      }
    };
  }
  if (main_grad_dtype(cfg_.training) != DType::F32)  // 16-bit main grads: each backward's sum rounded (grad_buffer.h)
    sched.after_backward = [this](int64_t, int64_t) {
      grad_buffer_->round_accumulated();
      if (expert_grad_buffer_) expert_grad_buffer_->round_accumulated();
    };
  forward_backward(pipeline_, sched);
  for (const Batch& batch : batches) o.tokens += batch.tokens.numel() * dp.size();  // the whole global batch
  // Megatron finalize_model_grads: gradients averaged over dp × cp (per-token loss: summed, the
  // scale already divides by the global token count; with overlap_grad_reduce the buckets started
  // during the backward and are waited for here), then the tied embedding copies' gradients
  // summed over the embedding group.
  grad_buffer_->finish_grad_sync();
  if (expert_grad_buffer_) expert_grad_buffer_->finish_grad_sync();  // experts: over expert dp
  // (The tied embedding has a bucket of its own, so with the distributed optimizer both stages'
  // dp ranks own the same rows of it: finalize_model_grads sums reduced rows with reduced rows.)
  finalize_model_grads(pipeline_);
  if (loss_scaler_) {  // Megatron _unscale_main_grads_and_check_for_nan: Inf/NaN stay, and skip the step below
    grad_buffer_->scale(1.0 / loss_scaler_->scale());
    if (expert_grad_buffer_) expert_grad_buffer_->scale(1.0 / loss_scaler_->scale());
  }
  o.losses = losses.reduce();
  o.counted = losses.counted();
  o.loss = o.losses.front().second;  // the LM loss (loss_names() starts with it)
  complete_tensor_metrics();  // finalized gradients, masters before the update (Megatron's placement)
  phase_timer::Scope t("optimizer");
  o.opt = optimizer_->step(lr, embedding_output_lr);
  if (loss_scaler_) loss_scaler_->update(o.opt.skipped);
  if (moe_) moe_->end_of_step();  // expert bias and load statistics (skipped steps too, as Megatron)
  for (LanguageModel* chunk : pipeline_.chunks) chunk->end_of_step();  // e.g. MoE global_aux_loss sums
  return o;
}

EvalResult Trainer::evaluate(int64_t index) {
  STRATA_CHECK(valid_data_ != nullptr, "trainer: evaluate() without a validation data source");
  ValidationLosses totals(loss_names_);
  for (int64_t k = 0; k < cfg_.training->eval_iters; ++k) {
    const int64_t step = index * cfg_.training->eval_iters + k + 1;
    std::vector<Batch> batches;
    const StepPosition at = StepPosition::constant_batch(step, *cfg_.training->global_batch_size);
    for (int64_t mb = 0; mb < eval_micro_batches_; ++mb)  // context parallelism: this cp rank's chunks
      batches.push_back(cp::split_batch(valid_data_->next_microbatch(at, mb), options_.groups.cp.size(),
                                        options_.groups.cp.rank()));
    RunObservers::Step observed(observers_, ObservationContext{iteration_, 0, 0, ObservationPhase::Eval});
    ScheduleStep sched;
    sched.step = step;
    sched.num_micro_batches = eval_micro_batches_;
    sched.forward_only = true;
    sched.batch = [&](int64_t mb) -> const Batch& { return batches[static_cast<size_t>(mb)]; };
    sched.loss_func = [&](int64_t mb, const std::vector<NamedLoss>& l) {
      totals.on_forward(batches[static_cast<size_t>(mb)], l);
      return std::vector<Tensor>();
    };
    forward_backward(pipeline_, sched);
  }
  EvalResult r;
  r.losses = totals.reduce(loss_groups(), comm_seconds_);
  r.counted = !r.losses.empty() && r.losses.front().first == kLmLossName;
  r.loss = r.counted ? r.losses.front().second : std::nan("");
  r.ppl = std::exp(std::min(20.0, r.loss));
  return r;
}

}  // namespace strata
