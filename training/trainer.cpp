// The single-process training loop (see trainer.h).
#include "training/trainer.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <ostream>
#include <streambuf>

#include "core/allocator.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/phase_timer.h"
#include "parallel/context_parallel.h"
#include "training/checkpoint.h"
#include "training/signals.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;

// Σ loss_i · mask_i and Σ mask_i on the host, in index order (deterministic).
std::pair<double, double> masked_sum(const Tensor& losses, const Tensor& mask) {
  const std::vector<double> l = losses.to_vector(), m = mask.to_vector();
  STRATA_CHECK(l.size() == m.size(), "trainer: the model returned ", l.size(), " losses for a batch of ",
               m.size(), " tokens");
  double s = 0.0, n = 0.0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (m[i] != 0.0) s += l[i] * m[i];
    n += m[i];
  }
  return {s, n};
}

// Where non-logging ranks print: nowhere.
struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c; }
};
std::ostream& null_stream() {
  static NullBuffer buf;
  static std::ostream os(&buf);
  return os;
}

// Sums (or averages) a few host doubles over a group; identity for a group of one.
std::vector<double> reduce_values(const ProcessGroup& g, std::vector<double> v, ReduceOp op, double& seconds) {
  if (g.size() == 1) return v;
  const auto t0 = Clock::now();
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F64, Device::cpu());
  g.all_reduce(t, op);
  seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return t.to_vector();
}

Tensor scaled_mask(const Tensor& mask, double scale, Device device) {
  std::vector<double> m = mask.to_vector();
  for (double& v : m) v *= scale;
  return Tensor::from_vector(m, mask.shape(), DType::F32, device);
}

AdamWSettings adam_settings(const StrataConfig& cfg) {
  AdamWSettings s;
  s.beta1 = cfg.optimizer.adam_beta1;
  s.beta2 = cfg.optimizer.adam_beta2;
  s.eps = cfg.optimizer.adam_eps;
  s.weight_decay = cfg.optimizer.weight_decay;
  s.clip_grad = cfg.optimizer.clip_grad;
  s.count_zeros = cfg.logging.log_num_zeros_in_grad;
  s.skip_non_finite = cfg.training.check_for_nan_in_loss_and_grad;
  return s;
}
}  // namespace

Trainer::Trainer(const StrataConfig& cfg, LanguageModel& model, BatchSource& train_data, BatchSource* valid_data,
                 TrainerOptions options)
    : cfg_(cfg), model_(model), train_data_(train_data), valid_data_(valid_data), options_(std::move(options)),
      schedule_(cfg.optimizer) {
  STRATA_CHECK(cfg_.training.global_batch_size.has_value(), "trainer: the config is not validated");
  num_micro_batches_ = cfg_.num_micro_batches();
  global_batch_size_ = *cfg_.training.global_batch_size;
  pipeline_ = options_.pipeline;
  if (pipeline_.chunks.empty()) pipeline_.chunks = {&model_};
  STRATA_CHECK(pipeline_.chunks.front() == &model_, "trainer: TrainerOptions.pipeline.chunks[0] must be the model");
  if (pipeline_.pp.size() == 1)
    for (LanguageModel* chunk : pipeline_.chunks)
      STRATA_CHECK(chunk->is_first_stage() && chunk->is_last_stage(),
                   "trainer: the model is a pipeline stage; set TrainerOptions.pipeline (training/pipeline_setup.h)");
  for (LanguageModel* chunk : pipeline_.chunks) {
    for (Parameter* p : chunk->parameters()) params_.push_back(p);
    if (options_.init_parameters) chunk->init_parameters(static_cast<uint64_t>(cfg_.training.seed));
  }
  STRATA_CHECK(!params_.empty(), "trainer: the model has no parameters");
  // ---- data parallelism: gradient buffer (Megatron DDP) and the (distributed) optimizer ----
  const ProcessGroup& dp = options_.groups.dp_cp;
  GradBufferOptions gbo;
  gbo.distributed_optimizer = cfg_.parallel.use_distributed_optimizer;
  gbo.bucket_size = default_ddp_bucket_size(cfg_.parallel.ddp_bucket_size, cfg_.parallel.overlap_grad_reduce, dp.size());
  if (pipeline_.embedding.size() > 1)  // tied embeddings across stages: a bucket of their own (grad_buffer.h)
    for (LanguageModel* chunk : pipeline_.chunks)
      for (Parameter* p : chunk->embedding_group_parameters()) gbo.own_bucket.push_back(p);
  grad_buffer_ = std::make_unique<GradBuffer>(params_, dp, gbo);
  optimizer_ = std::make_unique<AdamWOptimizer>(params_, adam_settings(cfg_), dp,
                                                gbo.distributed_optimizer ? grad_buffer_.get() : nullptr);
  optimizer_->set_model_parallel_group(options_.model_parallel, options_.groups.tp.rank());
  logging_rank_ = options_.groups.global_rank == options_.groups.world_size - 1;

  if (logging_rank_) {
    if (cfg_.logging.tensorboard_dir)
      if (auto s = make_tensorboard_sink(*cfg_.logging.tensorboard_dir)) owned_sinks_.push_back(std::move(s));
    if (cfg_.logging.metrics_jsonl) owned_sinks_.push_back(make_jsonl_sink(*cfg_.logging.metrics_jsonl));
    for (auto& s : owned_sinks_) sinks_.push_back(s.get());
    for (MetricsSink* s : options_.sinks) sinks_.push_back(s);
  }

  if (cfg_.checkpoint.load) {
    const std::string& dir = *cfg_.checkpoint.load;
    if (!read_checkpoint_tracker(dir)) {
      log::warn("checkpoint.load={}: no {} found, training from scratch", dir, kTrackerFile);
    } else {
      CheckpointLoadOptions lo;
      lo.load_optimizer = !cfg_.checkpoint.no_load_optim;
      lo.load_rng = !cfg_.checkpoint.no_load_rng;
      lo.finetune = cfg_.checkpoint.finetune;
      // Distributed optimizer: the state is read at full size, then this rank keeps its segments.
      const bool reads_optimizer = lo.load_optimizer && !lo.finetune;
      if (reads_optimizer) optimizer_->prepare_checkpoint_states();
      const CheckpointState st = load_checkpoint(dir, params_, optimizer_.get(), tensor_io(), lo);
      if (reads_optimizer) optimizer_->scatter_checkpoint_states();
      iteration_ = start_iteration_ = st.iteration;
      consumed_samples_ = st.consumed_train_samples;
      skipped_iterations_ = st.num_skipped_iterations;
      num_evaluations_ = st.num_evaluations;
      if (lo.load_rng && !lo.finetune && st.seed != static_cast<uint64_t>(cfg_.training.seed))
        log::warn("checkpoint {} was written with seed {}, this run uses training.seed={}", dir, st.seed,
                  cfg_.training.seed);
      out() << " loaded checkpoint from " << dir << " at iteration " << st.iteration
            << (lo.finetune ? " (finetune: weights only, starting at iteration 0)" : "") << std::endl;
    }
  }
}

Trainer::~Trainer() = default;

std::ostream& Trainer::out() {
  if (!logging_rank_) return null_stream();
  return options_.log_stream ? *options_.log_stream : std::cout;
}

TensorFileIO& Trainer::tensor_io() {
  if (!options_.tensor_io) options_.tensor_io = make_default_tensor_file_io();
  return *options_.tensor_io;
}

Trainer::StepOutcome Trainer::train_step(double lr) {
  StepOutcome o;
  {
    phase_timer::Scope t("zero_grad");
    grad_buffer_->zero();  // every main_grad (views into the buffer)
  }
  const Device device = params_.front()->value.device();
  const int64_t step = iteration_ + 1;
  const ProcessGroup& dp = options_.groups.dp_cp;

  // The valid-token counts are needed before the first backward; batches are small host tensors.
  std::vector<Batch> batches;
  batches.reserve(static_cast<size_t>(num_micro_batches_));
  double global_valid = 0.0;
  // Context parallelism (Megatron get_batch_on_this_cp_rank): every cp rank reads the same
  // micro-batch and keeps its two sequence chunks; each micro-batch's token count is summed over cp.
  const ProcessGroup& cpg = options_.groups.cp;
  std::vector<double> mb_valid;
  for (int64_t mb = 0; mb < num_micro_batches_; ++mb) {
    batches.push_back(cp::split_batch(train_data_.next_microbatch(step, mb), cpg.size(), cpg.rank()));
    mb_valid.push_back(masked_sum(batches.back().loss_mask, batches.back().loss_mask).second);
    global_valid += mb_valid.back();
  }
  mb_valid = reduce_values(cpg, mb_valid, ReduceOp::Sum, comm_seconds_);
  // Megatron: with calculate_per_token_loss the token count is summed over dp × cp.
  if (cfg_.training.calculate_per_token_loss) global_valid = reduce_values(dp, {global_valid}, ReduceOp::Sum, comm_seconds_)[0];

  // A micro-batch without valid tokens contributes 0 (Megatron would divide by zero).
  // The loss function runs on the last pipeline stage (every micro-batch's forward then backward
  // without pipelining); the schedule is the layout's (training/schedules.h).
  double loss_sum = 0.0;
  ScheduleStep sched;
  sched.step = step;
  sched.num_micro_batches = num_micro_batches_;
  sched.batch = [&](int64_t mb) -> const Batch& { return batches[static_cast<size_t>(mb)]; };
  sched.loss_func = [&](int64_t mb, const Tensor& losses) {
    const Batch& batch = batches[static_cast<size_t>(mb)];
    const double sum = masked_sum(losses, batch.loss_mask).first;
    double scale;
    if (cfg_.training.calculate_per_token_loss) {
      scale = 1.0 / std::max(global_valid, 1.0);
      loss_sum += sum;
    } else {
      // Megatron: the loss of the whole sequence (token count summed over cp), times cp because
      // the gradients are averaged over dp × cp; this rank's share of the loss sum.
      const double seq_valid = std::max(mb_valid[static_cast<size_t>(mb)], 1.0);
      scale = static_cast<double>(cpg.size()) / (seq_valid * static_cast<double>(num_micro_batches_));
      loss_sum += sum / seq_valid;
    }
    return scaled_mask(batch.loss_mask, scale, device);
  };
  // Overlapped gradient reduction (parallel.overlap_grad_reduce, Megatron DDP's grad hooks): the
  // last micro-batch's backward reports each parameter as it finishes it, and a bucket starts its
  // asynchronous reduction once all its parameters are reported (training/grad_buffer.h).
  grad_buffer_->set_reduce_op(cfg_.training.calculate_per_token_loss ? ReduceOp::Sum : ReduceOp::Avg);
  if (cfg_.parallel.overlap_grad_reduce) {
    sched.grad_ready = [this](const std::vector<Parameter*>& ps) {
      for (const Parameter* p : ps) grad_buffer_->register_grad_ready(p);
    };
  }
  forward_backward(pipeline_, sched);
  for (const Batch& batch : batches) o.tokens += batch.tokens.numel() * dp.size();  // the whole global batch
  // Megatron finalize_model_grads: gradients averaged over dp × cp (per-token loss: summed, the
  // scale already divides by the global token count; with overlap_grad_reduce the buckets started
  // during the backward and are waited for here), then the tied embedding copies' gradients
  // summed over the embedding group.
  grad_buffer_->finish_grad_sync();
  // (The tied embedding has a bucket of its own, so with the distributed optimizer both stages'
  // dp ranks own the same rows of it: finalize_model_grads sums reduced rows with reduced rows.)
  finalize_model_grads(pipeline_);
  // Context parallelism: each cp rank holds its tokens' part of the loss (per-token loss: summed over dp × cp below).
  if (!cfg_.training.calculate_per_token_loss)
    loss_sum = reduce_values(cpg, {loss_sum}, ReduceOp::Sum, comm_seconds_)[0];
  if (pipeline_.pp.size() > 1) {  // the last stage computed the loss (Megatron logs it there)
    Tensor t = Tensor::full({1}, loss_sum, DType::F64);
    pipeline_.pp.broadcast(t, pipeline_.pp.size() - 1);
    loss_sum = t.item();
  }
  // The reported loss is the dp average (per-token: global sum / global count).
  if (cfg_.training.calculate_per_token_loss) {
    o.loss = reduce_values(dp, {loss_sum}, ReduceOp::Sum, comm_seconds_)[0] / std::max(global_valid, 1.0);
  } else {
    o.loss = reduce_values(dp, {loss_sum / static_cast<double>(num_micro_batches_)}, ReduceOp::Avg, comm_seconds_)[0];
  }
  phase_timer::Scope t("optimizer");
  o.opt = optimizer_->step(lr);
  return o;
}

EvalResult Trainer::evaluate(int64_t index) {
  STRATA_CHECK(valid_data_ != nullptr, "trainer: evaluate() without a validation data source");
  double sum = 0.0, valid = 0.0;
  for (int64_t k = 0; k < cfg_.training.eval_iters; ++k) {
    const int64_t step = index * cfg_.training.eval_iters + k + 1;
    std::vector<Batch> batches;
    for (int64_t mb = 0; mb < num_micro_batches_; ++mb)  // context parallelism: this cp rank's chunks
      batches.push_back(cp::split_batch(valid_data_->next_microbatch(step, mb), options_.groups.cp.size(),
                                        options_.groups.cp.rank()));
    ScheduleStep sched;
    sched.step = step;
    sched.num_micro_batches = num_micro_batches_;
    sched.forward_only = true;
    sched.batch = [&](int64_t mb) -> const Batch& { return batches[static_cast<size_t>(mb)]; };
    sched.loss_func = [&](int64_t mb, const Tensor& losses) {
      const auto [s, n] = masked_sum(losses, batches[static_cast<size_t>(mb)].loss_mask);
      sum += s;
      valid += n;
      return Tensor();
    };
    forward_backward(pipeline_, sched);
  }
  if (pipeline_.pp.size() > 1) {  // computed on the last stage
    Tensor t = Tensor::from_vector({sum, valid}, {2}, DType::F64);
    pipeline_.pp.broadcast(t, pipeline_.pp.size() - 1);
    sum = t.to_vector()[0];
    valid = t.to_vector()[1];
  }
  const std::vector<double> totals = reduce_values(options_.groups.dp_cp, {sum, valid}, ReduceOp::Sum, comm_seconds_);
  sum = totals[0];
  valid = totals[1];
  EvalResult r;
  r.loss = sum / std::max(valid, 1.0);
  r.ppl = std::exp(std::min(20.0, r.loss));
  return r;
}

void Trainer::save_checkpoint() {
  STRATA_CHECK(cfg_.checkpoint.save.has_value(), "trainer: checkpoint.save is not set");
  CheckpointState st;
  st.iteration = iteration_;
  st.consumed_train_samples = consumed_samples_;
  st.optimizer_step_count = optimizer_->step_count();
  st.num_skipped_iterations = skipped_iterations_;
  st.num_evaluations = num_evaluations_;
  st.seed = static_cast<uint64_t>(cfg_.training.seed);
  st.config_yaml = cfg_.to_yaml();
  const auto t0 = Clock::now();
  // Collective (sharded checkpoint, training/checkpoint.h): the distributed optimizer's shards are
  // gathered within dp to the tp/pp shard; every rank writes the pieces it uniquely owns (dp rank 0;
  // replicated parameters from tp rank 0); rank 0 writes the manifest and, after a barrier, the tracker.
  const ProcessGroup& world = options_.groups.world;
  STRATA_CHECK(pipeline_.pp.size() == 1 || world.size() > 1,
               "trainer: checkpoint.save under pipeline parallelism needs TrainerOptions.groups (the world group)");
  optimizer_->gather_checkpoint_states();
  CheckpointSaveLayout layout;
  layout.world = world;
  layout.tp_rank = options_.groups.tp.rank();
  layout.dp_rank = options_.groups.dp_cp.rank();
  const std::string dir =
      strata::save_checkpoint(*cfg_.checkpoint.save, st, params_, optimizer_.get(), tensor_io(), true, layout);
  optimizer_->release_checkpoint_states();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  out() << " saved checkpoint at iteration " << iteration_ << " to " << dir << " (" << ms << " ms)" << std::endl;
  last_saved_iteration_ = iteration_;
  saved_iterations_.push_back(iteration_);
}

TrainResult Trainer::train() {
  StopSignalGuard guard;
  TrainResult result;
  result.start_iteration = start_iteration_;
  const int64_t train_iters = cfg_.training.train_iters;
  const int64_t log_interval = std::max<int64_t>(1, cfg_.logging.log_interval);
  const Device device = params_.front()->value.device();
  const auto run_start = Clock::now();

  // Accumulated since the last log line (Megatron's total_loss_dict).
  double interval_loss = 0.0;
  int64_t interval_advanced = 0, interval_skipped = 0, interval_iters = 0, interval_tokens = 0;
  double interval_grad_exposed = 0.0, interval_grad_inflight = 0.0;  // gradient reduction (dp > 1)
  auto interval_start = Clock::now();

  auto finish = [&](int code) {
    for (MetricsSink* s : sinks_) s->flush();
    result.exit_code = code;
    result.final_iteration = iteration_;
    result.skipped_iterations = skipped_iterations_;
    result.saved_iterations = saved_iterations_;
    return result;
  };
  auto should_save = [&]() { return cfg_.checkpoint.save.has_value() && last_saved_iteration_ != iteration_; };

  const ProcessGroup& world = options_.groups.world;
  while (iteration_ < train_iters) {
    // Step boundary: a stop signal saves and exits cleanly. With several ranks every rank must
    // stop at the same step (a signal may reach only some of them): agree over the world.
    bool stop = stop_signal_received();
    int signal_number = stop ? stop_signal_number() : 0;
    if (world.size() > 1) {
      double ignored = 0.0;
      const std::vector<double> any =
          reduce_values(world, {stop ? 1.0 : 0.0, static_cast<double>(signal_number)}, ReduceOp::Max, ignored);
      stop = any[0] > 0.0;
      signal_number = static_cast<int>(any[1]);
    }
    if (stop) {
      result.stopped_by_signal = true;
      result.stop_signal = signal_number;
      out() << " received signal " << result.stop_signal << ", stopping at iteration " << iteration_ << std::endl;
      if (should_save()) save_checkpoint();
      return finish(0);
    }

    const double lr = schedule_.lr(iteration_);  // Megatron: iteration i uses lr(i - 1)
    const auto step_start = Clock::now();
    const double comm_before = comm_seconds_ + grad_buffer_->communication_seconds() + optimizer_->communication_seconds();
    const double grad_exposed_before = grad_buffer_->communication_seconds();
    const double grad_inflight_before = grad_buffer_->communication_inflight_seconds();
    const StepOutcome o = train_step(lr);
    result.train_step_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
    result.communication_seconds +=
        comm_seconds_ + grad_buffer_->communication_seconds() + optimizer_->communication_seconds() - comm_before;
    const double grad_exposed = grad_buffer_->communication_seconds() - grad_exposed_before;
    const double grad_inflight = grad_buffer_->communication_inflight_seconds() - grad_inflight_before;
    result.grad_reduce_exposed_seconds += grad_exposed;
    result.grad_reduce_seconds += grad_inflight;
    result.grad_buckets_started_early += grad_buffer_->buckets_started_early_last_step();
    interval_grad_exposed += grad_exposed;
    interval_grad_inflight += grad_inflight;
    ++iteration_;
    consumed_samples_ += global_batch_size_;
    ++interval_iters;
    interval_tokens += o.tokens;
    result.losses.push_back(o.loss);
    result.grad_norms.push_back(o.opt.grad_norm);

    if (o.opt.skipped) {
      ++skipped_iterations_;
      ++interval_skipped;
      if (result.first_non_finite_param.empty()) result.first_non_finite_param = o.opt.first_non_finite;
      log::warn("iteration {}: grad norm is {}, skipping the step; first parameter with a non-finite gradient: {}",
                iteration_, o.opt.grad_norm, o.opt.first_non_finite.empty() ? "(none found)" : o.opt.first_non_finite);
      if (cfg_.training.exit_on_nan) {
        log::error("training.exit_on_nan: stopping at iteration {} (non-finite grad norm in {})", iteration_,
                   o.opt.first_non_finite);
        return finish(1);
      }
    } else {
      interval_loss += o.loss;
      ++interval_advanced;
    }

    if (iteration_ % log_interval == 0) {
      const double secs = std::chrono::duration<double>(Clock::now() - interval_start).count();
      IterationLog f;
      f.iteration = iteration_;
      f.train_iters = train_iters;
      f.consumed_samples = consumed_samples_;
      f.elapsed_ms_per_iteration = secs * 1000.0 / static_cast<double>(interval_iters);
      f.learning_rate = schedule_.lr(iteration_);  // Megatron logs the lr after the scheduler step
      f.global_batch_size = global_batch_size_;
      const double avg_loss = interval_loss / static_cast<double>(std::max<int64_t>(1, interval_advanced));
      f.losses.push_back({"lm loss", avg_loss});
      f.loss_scale = 1.0;
      f.grad_norm = o.opt.grad_norm;
      if (cfg_.logging.log_num_zeros_in_grad) f.num_zeros = o.opt.num_zeros;
      f.skipped_iterations = interval_skipped;
      f.nan_iterations = interval_skipped;
      const double tps = secs > 0 ? static_cast<double>(interval_tokens) / secs : 0.0;
      f.tokens_per_second = tps;
      const double flops = options_.flops_per_token ? options_.flops_per_token() : 0.0;
      const double per_device = tps / static_cast<double>(std::max(1, options_.groups.world_size));
      if (cfg_.logging.log_throughput && flops > 0) f.throughput_tflops_per_gpu = flops * per_device / 1e12;
      if (flops > 0 && options_.peak_flops_per_second > 0)
        f.mfu_percent = 100.0 * flops * per_device / options_.peak_flops_per_second;
      out() << format_iteration_log(f, std::chrono::system_clock::now()) << std::endl;
      // Data parallelism: how much of the gradient reduction the backward hid (overlap_grad_reduce).
      const bool data_parallel = options_.groups.dp_cp.size() > 1;
      if (data_parallel) {
        const double per_iter = 1000.0 / static_cast<double>(interval_iters);
        out() << " grad reduce: exposed " << interval_grad_exposed * per_iter << " ms of "
              << interval_grad_inflight * per_iter << " ms in flight per iteration ("
              << grad_buffer_->buckets().size() << " buckets, "
              << grad_buffer_->buckets_started_early_last_step() << " started during the backward)" << std::endl;
      }

      const MemoryStats mem = memory_stats(device);
      nlohmann::json rec = {{"iteration", iteration_},
                            {"consumed_samples", consumed_samples_},
                            {"lm loss", avg_loss},
                            {"learning-rate", *f.learning_rate},
                            {"grad-norm", o.opt.grad_norm},
                            {"loss-scale", f.loss_scale},
                            {"batch-size", global_batch_size_},
                            {"iteration-time", f.elapsed_ms_per_iteration / 1000.0},
                            {"mem-allocated-bytes", mem.allocated_bytes},
                            {"mem-max-allocated-bytes", mem.max_allocated_bytes},
                            {"skipped-iterations", interval_skipped},
                            {"nan-iterations", interval_skipped},
                            {"tokens-per-second", tps}};
      if (f.num_zeros) rec["num-zeros"] = *f.num_zeros;
      if (data_parallel) {
        rec["grad-reduce-exposed-time"] = interval_grad_exposed / static_cast<double>(interval_iters);
        rec["grad-reduce-time"] = interval_grad_inflight / static_cast<double>(interval_iters);
      }
      if (f.mfu_percent) rec["mfu"] = *f.mfu_percent;
      if (!std::isfinite(o.opt.grad_norm)) rec["grad-norm"] = nullptr;  // JSON has no NaN
      for (MetricsSink* s : sinks_) {
        // Each tag against the iteration, and its "<tag> vs samples" twin (metrics_log.h).
        auto put = [&](const char* tag, double v) { add_scalar_with_samples_twin(*s, tag, v, iteration_, consumed_samples_); };
        if (interval_advanced > 0) put("lm loss", avg_loss);
        put("learning-rate", *f.learning_rate);
        put("grad-norm", o.opt.grad_norm);
        if (f.num_zeros) put("num-zeros", *f.num_zeros);
        put("iteration-time", f.elapsed_ms_per_iteration / 1000.0);
        put("mem-allocated-bytes", static_cast<double>(mem.allocated_bytes));
        put("mem-max-allocated-bytes", static_cast<double>(mem.max_allocated_bytes));
        put("loss-scale", f.loss_scale);
        put("batch-size", static_cast<double>(global_batch_size_));
        s->write_record(rec);
        s->flush();
      }
      interval_loss = 0.0;
      interval_advanced = interval_skipped = interval_iters = interval_tokens = 0;
      interval_grad_exposed = interval_grad_inflight = 0.0;
      interval_start = Clock::now();
    }

    if (valid_data_ && cfg_.training.eval_interval > 0 && cfg_.training.eval_iters > 0 &&
        iteration_ % cfg_.training.eval_interval == 0) {
      const EvalResult e = evaluate(num_evaluations_++);
      result.validations.push_back({iteration_, e});
      out() << format_validation_log("iteration " + std::to_string(iteration_), e.loss, e.ppl) << std::endl;
      for (MetricsSink* s : sinks_) {
        add_scalar_with_samples_twin(*s, "lm loss validation", e.loss, iteration_, consumed_samples_);
        add_scalar_with_samples_twin(*s, "lm loss validation ppl", e.ppl, iteration_, consumed_samples_);
        s->write_record({{"iteration", iteration_}, {"lm loss validation", e.loss}, {"lm loss validation ppl", e.ppl}});
      }
      interval_start = Clock::now();  // evaluation time is not iteration time
    }

    if (cfg_.checkpoint.save && cfg_.checkpoint.save_interval && *cfg_.checkpoint.save_interval > 0 &&
        iteration_ % *cfg_.checkpoint.save_interval == 0)
      save_checkpoint();

    const bool exit_iter = cfg_.training.exit_interval && *cfg_.training.exit_interval > 0 &&
                           iteration_ % *cfg_.training.exit_interval == 0;
    bool exit_time =
        cfg_.training.exit_duration_in_mins &&
        std::chrono::duration<double>(Clock::now() - run_start).count() / 60.0 > *cfg_.training.exit_duration_in_mins;
    if (cfg_.training.exit_duration_in_mins && world.size() > 1) {  // every rank exits at the same step
      double ignored = 0.0;
      exit_time = reduce_values(world, {exit_time ? 1.0 : 0.0}, ReduceOp::Max, ignored)[0] > 0.0;
    }
    if (exit_iter || exit_time) {
      out() << " exiting at iteration " << iteration_ << (exit_iter ? " (exit_interval)" : " (exit_duration_in_mins)")
            << std::endl;
      if (should_save()) save_checkpoint();
      return finish(0);
    }
  }
  if (should_save() && iteration_ > 0) save_checkpoint();
  return finish(0);
}

}  // namespace strata
