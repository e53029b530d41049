// Trainer::save_checkpoint and checkpoint.async_save (Megatron's --async-save): the state is copied
// off the training path on the main thread (begin_checkpoint_save), the files are written by a
// background thread while training goes on (AsyncCheckpointWriter), and the save is finalized
// (manifest, rename to iter_X, tracker, save_retain_interval) on the main thread: after a step
// once every rank's write has ended, before the next save, and at the end of training (also a stop
// by signal or exit_interval). The save that is finalized is the one that was started: its
// iteration's state, whatever training did since.
// Reference: megatron/training/checkpointing.py (save_checkpoint: async_save schedules the write and
// a finalize function for the tracker), megatron/training/async_utils.py (maybe_finalize_async_save,
// blocking at the next save and at the end of training, non-blocking after each step).
#include <chrono>

#include "core/error.h"
#include "core/logging.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_directory.h"
#include "training/checkpointing/checkpoint_save.h"
#include "training/checkpointing/megatron/megatron_legacy_write.h"
#include "training/checkpointing/megatron/megatron_torch_dist_write.h"
#include "training/trainer.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
}

void Trainer::save_checkpoint() {
  STRATA_CHECK(cfg_.checkpoint->save.has_value(), "trainer: checkpoint.save is not set");
  if (async_writer_ && async_writer_->pending()) finalize_async_save();  // one pending save at a time
  CheckpointState st;
  st.iteration = iteration_;
  st.consumed_train_samples = consumed_samples_;
  st.lr_scheduler_steps = scheduler_steps_;
  st.lr_schedule = schedule_.state();
  if (decoupled_schedule_) {
    st.lr_schedule->decoupled_max_lr = decoupled_schedule_->max_lr();
    st.lr_schedule->decoupled_min_lr = decoupled_schedule_->min_lr();
  }
  if (loss_scaler_) st.loss_scaler = loss_scaler_->state();
  st.optimizer_step_count = optimizer_->step_count();
  st.num_skipped_iterations = skipped_iterations_;
  st.num_evaluations = num_evaluations_;
  st.seed = static_cast<uint64_t>(cfg_.training->seed);
  st.config_yaml = cfg_.to_yaml();
  const auto t0 = Clock::now();
  // Collective (sharded checkpoint, training/checkpointing/checkpoint.h): the distributed optimizer's shards are
  // gathered within dp to the tp/pp shard; every rank writes the pieces it uniquely owns (dp rank 0;
  // replicated parameters from tp rank 0); rank 0 writes the manifest and, after a barrier, the tracker.
  const ProcessGroup& world = options_.groups.world;
  STRATA_CHECK(pipeline_.pp.size() == 1 || world.size() > 1,
               "trainer: checkpoint.save under pipeline parallelism needs TrainerOptions.groups (the world group)");
  if (!cleaned_save_directory_ && options_.groups.global_rank == 0)  // this run's first save
    for (const std::string& p : clean_checkpoint_directory(*cfg_.checkpoint->save,
                                                           cfg_.checkpoint->overwrite && !resumes_from_save_directory(cfg_)))
      log::info("checkpoint.save: removed {} (an interrupted save's leftover, or a replaced run's checkpoint)", p);
  cleaned_save_directory_ = true;
  const bool retains = cfg_.checkpoint->save_retain_interval && options_.groups.global_rank == 0;
  const std::optional<int64_t> previous = retains ? read_checkpoint_tracker(*cfg_.checkpoint->save) : std::nullopt;
  optimizer_->gather_checkpoint_states();
  CheckpointSaveLayout layout;
  layout.world = world;
  layout.tp_rank = options_.groups.tp.rank();
  layout.dp_rank = options_.groups.dp_cp.rank();
  layout.expert_dp_rank = options_.groups.expert_dp.rank();
  layout.expert_tp_rank = options_.groups.expert_tp.rank();
  CheckpointSaveJobPtr job =
      begin_checkpoint_save(*cfg_.checkpoint->save, st, checkpointed_, optimizer_.get(), tensor_io(), true, layout);
  optimizer_->release_checkpoint_states();
  if (cfg_.checkpoint->ckpt_format == CkptFormat::TorchDist)  // Megatron-Core's format (rank 0 converts)
    set_checkpoint_converter(*job, [this](const std::string& strata_dir, const std::string& out_dir) {
      write_megatron_torch_dist(strata_dir, out_dir, cfg_, tensor_io());
    });
  if (cfg_.checkpoint->ckpt_format == CkptFormat::Torch)  // Megatron's legacy format, one model-parallel rank
    set_checkpoint_converter(*job, [this](const std::string& strata_dir, const std::string& out_dir) {
      write_megatron_legacy(strata_dir, out_dir, cfg_, tensor_io());
    });
  last_saved_iteration_ = iteration_;
  if (cfg_.checkpoint->async_save) {
    if (!async_writer_) async_writer_ = std::make_unique<AsyncCheckpointWriter>();
    async_writer_->start(std::move(job));
    async_previous_ = previous;
    async_started_ = t0;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    out() << " saving checkpoint at iteration " << iteration_ << " in the background (state copied in " << ms
          << " ms)" << std::endl;
    return;
  }
  write_checkpoint_files(*job);
  complete_save(finalize_checkpoint_save(*job), st.iteration, previous, t0);
}

// A save is complete: logged, the previous checkpoint retired (save_retain_interval), recorded.
void Trainer::complete_save(const std::string& dir, int64_t iteration, std::optional<int64_t> previous,
                            std::chrono::steady_clock::time_point t0) {
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  out() << " saved checkpoint at iteration " << iteration << " to " << dir << " (" << ms << " ms)" << std::endl;
  if (cfg_.checkpoint->save_retain_interval && options_.groups.global_rank == 0)
    if (const std::string gone = retire_previous_checkpoint(*cfg_.checkpoint->save, previous, iteration,
                                                            *cfg_.checkpoint->save_retain_interval);
        !gone.empty())
      log::info("checkpoint.save_retain_interval: removed {}", gone);
  saved_iterations_.push_back(iteration);
}

void Trainer::finalize_async_save() {
  if (!async_writer_ || !async_writer_->pending()) return;
  const int64_t iteration = async_writer_->iteration();
  complete_save(async_writer_->finalize(), iteration, async_previous_, async_started_);
}

// Megatron's maybe_finalize_async_save(blocking=False) after each step: finalized once every rank's
// write has ended (a one-number all-reduce over the world while a save is pending).
void Trainer::maybe_finalize_async_save() {
  if (!async_writer_ || !async_writer_->pending()) return;
  bool all_ready = async_writer_->ready();
  const ProcessGroup& world = options_.groups.world;
  if (world.size() > 1) {
    Tensor flag = Tensor::full({1}, all_ready ? 1.0 : 0.0, DType::F32);
    world.all_reduce(flag, ReduceOp::Min);
    all_ready = flag.to_vector()[0] > 0.5;
  }
  if (all_ready) finalize_async_save();
}

}  // namespace strata
