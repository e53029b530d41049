// The training loop of the Trainer (see trainer.h): Trainer::train and its parts — the
// stop-signal agreement at step boundaries, per-step bookkeeping, Megatron's log line and the
// metric sinks every log_interval (one list of named losses from the loss channel), validation,
// checkpoints and the exit conditions.
// Reference: megatron/training/training.py (train, training_log, evaluate_and_print_results,
// save_checkpoint_and_time, the exit_interval / exit_duration_in_mins checks).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <ostream>

#include "core/allocator.h"
#include "core/logging.h"
#include "core/memory_history.h"
#include "core/phase_timer.h"
#include "parallel/watchdog.h"
#include "training/signals.h"
#include "training/step_losses.h"
#include "training/trainer.h"
#include "training/weight_hash_check.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
}

// Accumulated since the last log line (Megatron's total_loss_dict).
struct Trainer::Interval {
  std::vector<double> loss_sums;     // per loss name, over the advanced iterations that counted a token
  std::vector<int64_t> loss_steps;   // per loss name: how many iterations loss_sums holds
  int64_t advanced = 0, skipped = 0, nan = 0, iters = 0, tokens = 0;
  double grad_exposed = 0.0, grad_inflight = 0.0;  // gradient reduction (dp > 1)
  Clock::time_point start = Clock::now();
  void reset(size_t num_losses) {
    *this = Interval{};
    loss_sums.assign(num_losses, 0.0);
    loss_steps.assign(num_losses, 0);
  }
};

bool Trainer::stop_requested(TrainResult& result) {
  // Step boundary: a stop signal saves and exits cleanly. With several ranks every rank must
  // stop at the same step (a signal may reach only some of them): agree over the world.
  bool stop = stop_signal_received();
  int signal_number = stop ? stop_signal_number() : 0;
  const ProcessGroup& world = options_.groups.world;
  if (world.size() > 1) {
    double ignored = 0.0;
    const std::vector<double> any =
        reduce_values(world, {stop ? 1.0 : 0.0, static_cast<double>(signal_number)}, ReduceOp::Max, ignored);
    stop = any[0] > 0.0;
    signal_number = static_cast<int>(any[1]);
  }
  if (!stop) return false;
  result.stopped_by_signal = true;
  result.stop_signal = signal_number;
  out() << " received signal " << result.stop_signal << ", stopping at iteration " << iteration_ << std::endl;
  if (!cfg_.checkpoint->save && iteration_ > start_iteration_)  // nothing will keep this run's steps
    out() << " warning: no checkpoint.save, so the " << iteration_ - start_iteration_
          << " iterations this run trained (" << start_iteration_ + 1 << " to " << iteration_ << ") are not saved"
          << std::endl;
  return true;
}

// Megatron's --profile: the trace starts before the step after profile_step_start iterations and
// stops after profile_step_end, on the ranks of profile_ranks.
void Trainer::profile_boundary(bool after_step) {
  const LoggingConfig& l = cfg_.logging;
  if (!l.profile) return;
  const int64_t rank = options_.groups.global_rank;
  if (std::find(l.profile_ranks.begin(), l.profile_ranks.end(), rank) == l.profile_ranks.end()) return;
  if (!after_step && iteration_ == l.profile_step_start) phase_timer::start_trace();
  if (!after_step || iteration_ != l.profile_step_end || !phase_timer::tracing()) return;
  const std::filesystem::path dir = l.tensorboard_dir.value_or(".");
  std::filesystem::create_directories(dir);
  const std::string path = (dir / ("trace_rank" + std::to_string(rank) + "_iterations" +
                                   std::to_string(l.profile_step_start + 1) + "-" +
                                   std::to_string(l.profile_step_end) + ".json")).string();
  phase_timer::write_chrome_trace(path, phase_timer::stop_trace(), static_cast<int>(rank));
  out() << " profile: wrote " << path << std::endl;
}

// Megatron's update_num_microbatches at the top of each iteration: the batch size from the
// consumed samples; when the number of micro-batches changes (not at iteration 0) a checkpoint is
// saved first.
void Trainer::begin_step() {
  const int64_t size = batch_sizes_.global_batch_size(consumed_samples_);
  const int64_t per_step = cfg_.training->micro_batch_size * cfg_.data_parallel_size();
  STRATA_CHECK(size % per_step == 0, "training: the global batch size ", size, " at ", consumed_samples_,
               " consumed samples is not divisible by micro_batch_size x data-parallel size (", per_step, ")");
  const int64_t micro_batches = size / per_step;
  const bool first = iteration_ == start_iteration_;
  const bool changed = !first && micro_batches != num_micro_batches_;
  if (changed && cfg_.checkpoint->save && last_saved_iteration_ != iteration_) save_checkpoint();
  if ((first || changed) && !batch_sizes_.is_constant())
    out() << " global batch size " << size << " (" << micro_batches << " micro-batches per data-parallel rank) from "
          << consumed_samples_ << " consumed samples" << std::endl;
  global_batch_size_ = size;
  num_micro_batches_ = micro_batches;
}

Trainer::StepOutcome Trainer::timed_step(TrainResult& result, Interval& iv) {
  begin_step();
  const double lr = schedule_.lr(scheduler_steps_);  // Megatron: the scheduler's count before this step
  optimizer_->set_weight_decay(schedule_.weight_decay(scheduler_steps_));
  const auto step_start = Clock::now();
  // Both gradient buffers (dense over dp × cp, experts over expert dp).
  auto grad_exposed_total = [&] {
    return grad_buffer_->communication_seconds() +
           (expert_grad_buffer_ ? expert_grad_buffer_->communication_seconds() : 0.0);
  };
  auto grad_inflight_total = [&] {
    return grad_buffer_->communication_inflight_seconds() +
           (expert_grad_buffer_ ? expert_grad_buffer_->communication_inflight_seconds() : 0.0);
  };
  auto comm_total = [&] {
    return comm_seconds_ + grad_exposed_total() + optimizer_->communication_seconds() +
           (moe_ ? moe_->communication_seconds() : 0.0);
  };
  const double comm_before = comm_total();
  const double grad_exposed_before = grad_exposed_total();
  const double grad_inflight_before = grad_inflight_total();
  const StepOutcome o =
      train_step(lr, decoupled_schedule_ ? std::optional<double>(decoupled_schedule_->lr(scheduler_steps_)) : std::nullopt);
  const double step_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
  result.train_step_seconds += step_seconds;
  const double comm_seconds = comm_total() - comm_before;
  result.communication_seconds += comm_seconds;
  if (straggler_) straggler_->add(step_seconds - comm_seconds);
  const double grad_exposed = grad_exposed_total() - grad_exposed_before;
  const double grad_inflight = grad_inflight_total() - grad_inflight_before;
  result.grad_reduce_exposed_seconds += grad_exposed;
  result.grad_reduce_seconds += grad_inflight;
  result.grad_buckets_started_early += grad_buffer_->buckets_started_early_last_step();
  iv.grad_exposed += grad_exposed;
  iv.grad_inflight += grad_inflight;
  ++iteration_;
  consumed_samples_ += global_batch_size_;
  if (!o.opt.skipped) scheduler_steps_ += global_batch_size_;  // Megatron steps the scheduler on success only
  ++iv.iters;
  iv.tokens += o.tokens;
  result.losses.push_back(o.counted.front() ? o.loss : std::nan(""));
  result.grad_norms.push_back(o.opt.grad_norm);
  if (!o.counted.front()) warn_no_counted_tokens("iteration " + std::to_string(iteration_));
  return o;
}

// A step (or validation pass) whose labels are all masked has no loss: an empty denominator is
// reported as no value everywhere (console, JSONL, TensorBoard), never as 0.
void Trainer::warn_no_counted_tokens(const std::string& where) {
  if (warned_no_counted_tokens_) return;
  warned_no_counted_tokens_ = true;
  out() << " warning: " << where
        << ": no token was counted in the loss (every label is masked, e.g. data.eod_mask_loss on documents "
           "of EOD tokens only), so there is no loss to report; such steps are left out of the loss averages, "
           "the JSONL and TensorBoard (this warning is printed once)"
        << std::endl;
}

bool Trainer::account_skip(const StepOutcome& o, TrainResult& result, Interval& iv) {
  if (!o.opt.skipped) {
    for (size_t k = 0; k < o.losses.size(); ++k) {
      if (!o.counted[k]) continue;
      iv.loss_sums[k] += o.losses[k].second;
      ++iv.loss_steps[k];
    }
    ++iv.advanced;
    consecutive_skips_ = 0;
    return false;
  }
  ++skipped_iterations_;
  ++consecutive_skips_;
  ++iv.skipped;
  if (result.first_non_finite_param.empty()) result.first_non_finite_param = o.opt.first_non_finite;
  if (loss_scaler_ && loss_scaler_->at_minimum() && !warned_scale_at_minimum_) {
    warned_scale_at_minimum_ = true;
    out() << " warning: iteration " << iteration_ << " overflowed with the fp16 loss scale at its minimum ("
          << loss_scaler_->min_scale() << ", training.min_loss_scale): the scale cannot drop further, so steps that "
          << "keep overflowing are skipped and the model stops training. Set "
             "training.max_consecutive_skipped_iterations to stop such a run (printed once)"
          << std::endl;
  }
  if (exceeds_consecutive_skips()) return true;
  // fp16: the loss scaler's overflow skip, routine while the scale settles (Megatron logs it as a
  // skipped iteration only).
  if (loss_scaler_ && std::isfinite(o.loss)) return false;
  ++iv.nan;
  log::warn("iteration {}: grad norm is {}, skipping the step; first parameter with a non-finite gradient: {}",
            iteration_, o.opt.grad_norm, o.opt.first_non_finite.empty() ? "(none found)" : o.opt.first_non_finite);
  if (!cfg_.training->exit_on_nan) return false;
  if (logging_rank_)
    log::error("training.exit_on_nan: stopping at iteration {} (non-finite grad norm in {})", iteration_,
               o.opt.first_non_finite);
  return true;
}

// training.max_consecutive_skipped_iterations: a run that only skips is stopped (every rank sees
// the same skips: the decision is the optimizer's, after the global grad norm).
bool Trainer::exceeds_consecutive_skips() {
  const std::optional<int64_t>& limit = cfg_.training->max_consecutive_skipped_iterations;
  if (!limit || consecutive_skips_ < *limit) return false;
  if (logging_rank_)
    log::error("training.max_consecutive_skipped_iterations: iterations {} to {} were all skipped ({} in a row{}); "
               "stopping without a checkpoint (the last one saved holds the model before the skips)",
               iteration_ - consecutive_skips_ + 1, iteration_, consecutive_skips_,
               loss_scaler_ ? ", loss scale " + std::to_string(loss_scaler_->scale()) : std::string());
  return true;
}

// The run's last line: where it ended and how many iterations it skipped.
void Trainer::log_summary(const TrainResult& result) {
  out() << " training ended at iteration " << iteration_ << " of " << *cfg_.training->train_iters << ": "
        << iteration_ - start_iteration_ << " iterations this run, " << skipped_iterations_
        << " skipped in total (" << consecutive_skips_ << " in a row at the end)"
        << (result.exit_code != 0 ? ", stopped by an error" : "") << std::endl;
}

IterationLog Trainer::iteration_log(const StepOutcome& o, const Interval& iv, double secs) const {
  IterationLog f;
  f.iteration = iteration_;
  f.train_iters = *cfg_.training->train_iters;
  f.consumed_samples = consumed_samples_;
  f.elapsed_ms_per_iteration = secs * 1000.0 / static_cast<double>(iv.iters);
  f.seconds_left = secs / static_cast<double>(iv.iters) * static_cast<double>(f.train_iters - iteration_);
  f.learning_rate = schedule_.lr(scheduler_steps_);  // Megatron logs the lr after the scheduler step
  f.global_batch_size = global_batch_size_;
  for (size_t k = 0; k < loss_names_.size(); ++k) {
    if (iv.loss_steps[k] == 0) continue;  // no step of the interval has this loss
    const double v = iv.loss_sums[k] / static_cast<double>(iv.loss_steps[k]);
    // MoE per-layer losses (moe_per_layer_logging) go to TensorBoard and JSONL, not the log line.
    (is_per_layer_metric(loss_names_[k]) ? f.per_layer : f.losses).push_back({loss_names_[k], v});
  }
  f.loss_scale = loss_scaler_ ? loss_scaler_->scale() : 1.0;  // after the scaler's update (Megatron)
  // fp16: a step the loss scaler skipped has no grad norm (Megatron's is None, not logged).
  if (!(loss_scaler_ && o.opt.skipped)) f.grad_norm = o.opt.grad_norm;
  if (cfg_.logging->log_num_zeros_in_grad) f.num_zeros = o.opt.num_zeros;
  f.skipped_iterations = iv.skipped;
  f.nan_iterations = iv.nan;
  const double tps = secs > 0 ? static_cast<double>(iv.tokens) / secs : 0.0;
  f.tokens_per_second = tps;
  const double flops = options_.flops_per_token ? options_.flops_per_token() : 0.0;
  const double per_device = tps / static_cast<double>(std::max(1, options_.groups.world_size));
  if (cfg_.logging->log_throughput && flops > 0) f.throughput_tflops_per_gpu = flops * per_device / 1e12;
  if (flops > 0 && options_.peak_flops_per_second > 0)
    f.mfu_percent = 100.0 * flops * per_device / options_.peak_flops_per_second;
  return f;
}

void Trainer::write_metrics(const IterationLog& f, const Interval& iv) {
  const MemoryStats mem = memory_stats(params_.front()->value.device());
  const double grad_norm = f.grad_norm.value_or(std::nan(""));
  nlohmann::json rec = {{"iteration", iteration_},
                        {"consumed_samples", consumed_samples_},
                        {"learning-rate", *f.learning_rate},
                        {"grad-norm", grad_norm},
                        {"loss-scale", f.loss_scale},
                        {"batch-size", global_batch_size_},
                        {"iteration-time", f.elapsed_ms_per_iteration / 1000.0},
                        {"mem-allocated-bytes", mem.allocated_bytes},
                        {"mem-max-allocated-bytes", mem.max_allocated_bytes},
                        {"skipped-iterations", iv.skipped},
                        {"nan-iterations", iv.nan},
                        {"tokens-per-second", *f.tokens_per_second}};
  if (iv.advanced > 0) {  // an interval of skipped iterations has no loss (as TensorBoard and the log line)
    for (const auto& [name, value] : f.losses) rec[name] = value;
    for (const auto& [name, value] : f.per_layer) rec[name] = value;
  }
  if (moe_ && !moe_->last_stats().empty()) {  // the logged iteration's expert load, per MoE layer
    nlohmann::json load = nlohmann::json::array();
    for (const ExpertLoadStats& s : moe_->last_stats()) load.push_back(to_json(s));
    rec["moe-expert-load"] = load;
  }
  if (f.num_zeros) rec["num-zeros"] = *f.num_zeros;
  if (options_.groups.dp_cp.size() > 1) {
    rec["grad-reduce-exposed-time"] = iv.grad_exposed / static_cast<double>(iv.iters);
    rec["grad-reduce-time"] = iv.grad_inflight / static_cast<double>(iv.iters);
  }
  if (f.mfu_percent) rec["mfu"] = *f.mfu_percent;
  if (!std::isfinite(grad_norm)) rec["grad-norm"] = nullptr;  // JSON has no NaN
  for (MetricsSink* s : sinks_) {
    // Each tag against the iteration, and its "<tag> vs samples" twin (metrics_log.h).
    auto put = [&](const std::string& tag, double v) {
      add_scalar_with_samples_twin(*s, tag.c_str(), v, iteration_, consumed_samples_);
    };
    if (iv.advanced > 0) {
      for (const auto& [name, value] : f.losses) put(name, value);
      for (const auto& [name, value] : f.per_layer) put(name, value);
    }
    put("learning-rate", *f.learning_rate);
    if (f.grad_norm) put("grad-norm", grad_norm);
    if (f.num_zeros) put("num-zeros", *f.num_zeros);
    put("iteration-time", f.elapsed_ms_per_iteration / 1000.0);
    put("mem-allocated-bytes", static_cast<double>(mem.allocated_bytes));
    put("mem-max-allocated-bytes", static_cast<double>(mem.max_allocated_bytes));
    put("loss-scale", f.loss_scale);
    put("batch-size", static_cast<double>(global_batch_size_));
    s->write_record(rec);
    s->flush();
  }
}

void Trainer::log_interval(const StepOutcome& o, Interval& iv) {
  const double secs = std::chrono::duration<double>(Clock::now() - iv.start).count();
  const IterationLog f = iteration_log(o, iv, secs);
  out() << format_iteration_log(f, std::chrono::system_clock::now()) << std::endl;
  // Data parallelism: how much of the gradient reduction the backward hid (overlap_grad_reduce).
  if (options_.groups.dp_cp.size() > 1) {
    const double per_iter = 1000.0 / static_cast<double>(iv.iters);
    out() << " grad reduce: exposed " << iv.grad_exposed * per_iter << " ms of " << iv.grad_inflight * per_iter
          << " ms in flight per iteration (" << grad_buffer_->buckets().size() << " buckets, "
          << grad_buffer_->buckets_started_early_last_step() << " started during the backward)" << std::endl;
  }
  if (straggler_)  // every rank: the report gathers their times
    for (const std::string& line : straggler_->report(iv.iters)) out() << line << std::endl;
  write_metrics(f, iv);
  iv.reset(loss_names_.size());
}

void Trainer::run_validation(TrainResult& result) {
  const EvalResult e = evaluate(num_evaluations_++);
  result.validations.push_back({iteration_, e});
  const std::string at = "iteration " + std::to_string(iteration_);
  if (e.counted) {
    out() << format_validation_log(at, e.loss, e.ppl) << std::endl;
  } else {
    out() << " validation loss at " << at << " | lm loss value: none (no counted tokens) | " << std::endl;
    warn_no_counted_tokens("validation at " + at);
  }
  nlohmann::json rec = {{"iteration", iteration_}};
  for (const auto& [name, loss] : e.losses) {
    const double ppl = std::exp(std::min(20.0, loss));
    rec[name + " validation"] = loss;
    rec[name + " validation ppl"] = ppl;
    for (MetricsSink* s : sinks_) {
      add_scalar_with_samples_twin(*s, (name + " validation").c_str(), loss, iteration_, consumed_samples_);
      add_scalar_with_samples_twin(*s, (name + " validation ppl").c_str(), ppl, iteration_, consumed_samples_);
    }
  }
  for (MetricsSink* s : sinks_) s->write_record(rec);
}

// Megatron's training_log: the snapshot at the first iteration and every log interval.
void Trainer::dump_memory_snapshot() {
  if (!memory_history::recording() || !memory_history_rank(cfg_.logging, options_.groups.global_rank)) return;
  const std::string path =
      memory_history::rank_snapshot_path(cfg_.logging->memory_snapshot_path, options_.groups.global_rank);
  memory_history::dump_snapshot(path);
  log::info("memory history: wrote {}", path);
}

void Trainer::check_weight_hashes(bool startup) {
  const std::optional<int64_t>& every = cfg_.training->check_weight_hash_across_dp_replicas_interval;
  if (!every || (!startup && iteration_ % *every != 0)) return;
  check_weight_hashes_across_replicas(params_, options_.groups, iteration_);
  out() << " weight hashes match across data-parallel replicas after " << iteration_ << " iterations" << std::endl;
}

bool Trainer::exit_due(Clock::time_point run_start) {
  const bool exit_iter = cfg_.training->exit_interval && *cfg_.training->exit_interval > 0 &&
                         iteration_ % *cfg_.training->exit_interval == 0;
  bool exit_time =
      cfg_.training->exit_duration_in_mins &&
      std::chrono::duration<double>(Clock::now() - run_start).count() / 60.0 > *cfg_.training->exit_duration_in_mins;
  const ProcessGroup& world = options_.groups.world;
  if (cfg_.training->exit_duration_in_mins && world.size() > 1) {  // every rank exits at the same step
    double ignored = 0.0;
    exit_time = reduce_values(world, {exit_time ? 1.0 : 0.0}, ReduceOp::Max, ignored)[0] > 0.0;
  }
  if (!exit_iter && !exit_time) return false;
  out() << " exiting at iteration " << iteration_ << (exit_iter ? " (exit_interval)" : " (exit_duration_in_mins)")
        << std::endl;
  return true;
}

TrainResult Trainer::train() {
  StopSignalGuard guard;
  TrainResult result;
  result.start_iteration = start_iteration_;
  result.loss_names = loss_names_;
  const int64_t log_interval_iters = std::max<int64_t>(1, cfg_.logging->log_interval);
  const auto run_start = Clock::now();
  Interval iv;
  iv.reset(loss_names_.size());

  auto finish = [&](int code) {
    finalize_async_save();  // checkpoint.async_save: the end of training waits for the pending save
    observers_.finish();  // e.g. the router tracer's files complete (also on a stop by signal)
    for (MetricsSink* s : sinks_) s->flush();
    result.exit_code = code;
    log_summary(result);
    result.final_iteration = iteration_;
    result.skipped_iterations = skipped_iterations_;
    result.saved_iterations = saved_iterations_;
    return result;
  };
  // A run saves only what it trained: relaunching a finished run (train_iters already reached) or
  // stopping before the first step writes nothing, so no checkpoint is replaced by a copy of itself
  // (Megatron's final save rewrites the loaded iteration, with --no-load-optim a fresh optimizer).
  auto should_save = [&]() {
    return cfg_.checkpoint->save.has_value() && last_saved_iteration_ != iteration_ && iteration_ > start_iteration_;
  };

  check_weight_hashes(/*startup=*/true);
  while (iteration_ < *cfg_.training->train_iters) {
    if (stop_requested(result)) {
      if (should_save()) save_checkpoint();
      return finish(0);
    }
    // A collective that hangs is reported at this step (parallel/watchdog.h): the iteration number
    // the log line gives the step once it completes.
    watchdog_set_step(iteration_ + 1);
    profile_boundary(/*after_step=*/false);
    StepOutcome o;
    {
      phase_timer::Scope step_scope("iteration");  // the trace's outermost event
      o = timed_step(result, iv);
    }
    profile_boundary(/*after_step=*/true);
    if (account_skip(o, result, iv)) return finish(1);
    maybe_finalize_async_save();  // a background save whose every rank has written becomes visible
    if (iteration_ % log_interval_iters == 0) log_interval(o, iv);
    if (iteration_ % log_interval_iters == 0 || iteration_ == start_iteration_ + 1) dump_memory_snapshot();
    check_weight_hashes(/*startup=*/false);
    if (valid_data_ && cfg_.training->eval_interval > 0 && cfg_.training->eval_iters > 0 &&
        iteration_ % cfg_.training->eval_interval == 0) {
      run_validation(result);
      iv.start = Clock::now();  // evaluation time is not iteration time
    }
    if (cfg_.checkpoint->save && cfg_.checkpoint->save_interval && *cfg_.checkpoint->save_interval > 0 &&
        iteration_ % *cfg_.checkpoint->save_interval == 0)
      save_checkpoint();
    if (exit_due(run_start)) {
      if (should_save()) save_checkpoint();
      return finish(0);
    }
  }
  if (should_save()) save_checkpoint();
  if (iteration_ == start_iteration_ && start_iteration_ > 0)
    out() << " nothing to train: the checkpoint is at iteration " << start_iteration_ << " and training.train_iters is "
          << *cfg_.training->train_iters << "; nothing was saved" << std::endl;
  return finish(0);
}

}  // namespace strata
