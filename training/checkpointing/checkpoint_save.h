// The collective checkpoint save (save_checkpoint in checkpoint.h) in its three phases, and the
// asynchronous writer of --async-save that runs the middle one in the background:
//   begin (collective, the caller's thread): rank 0 makes <save>/iter_X.tmp/; every rank copies the
//     pieces it owns (model, and optimizer state when given) to host memory: from here on training
//     may change the parameters;
//   write (local, any thread): this rank's tensor files, their CRC-32C and its shard_rank_R.json,
//     each fsynced;
//   finalize (collective, the caller's thread): a barrier; rank 0 merges the fragments into
//     manifest.json, fsyncs and renames iter_X.tmp to iter_X; a barrier; the tracker file; a barrier.
// A failure or crash before the rename leaves only iter_X.tmp/ (never loaded; a later run's first
// save removes it) and the previous checkpoint and tracker as they were.
// AsyncCheckpointWriter: start() runs the write phase on a thread of its own and returns;
// finalize() waits for it (rethrowing its error) and finalizes on the caller's thread, so every
// rank commits the same checkpoint at the same point of its loop; ready() says whether this rank's
// write has ended (Megatron checks all ranks' with a collective before a non-blocking finalize).
// Reference: megatron/training/checkpointing.py (save_checkpoint with async_save: the finalize
// function that writes the tracker), megatron/core/dist_checkpointing/strategies/async_utils.py
// (AsyncRequest: the async write function and its finalize functions, AsyncCallsQueue),
// megatron/training/async_utils.py (maybe_finalize_async_save).
#pragma once
#include <cstdint>
#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "training/checkpointing/checkpoint.h"

namespace strata {

// A checkpoint's text file (manifest, shard fragment), whole; an error naming the file when unreadable.
std::string read_checkpoint_text(const std::filesystem::path& p);

class CheckpointSaveJob;  // one save's host copies, paths and run state
struct CheckpointSaveJobDeleter {
  void operator()(CheckpointSaveJob* job) const;
};
using CheckpointSaveJobPtr = std::unique_ptr<CheckpointSaveJob, CheckpointSaveJobDeleter>;

// The begin phase (collective over layout.world). The job keeps a reference to io.
CheckpointSaveJobPtr begin_checkpoint_save(const std::string& save_dir, const CheckpointState& state,
                                                         const std::vector<Parameter*>& params, AdamWOptimizer* opt,
                                                         TensorFileIO& io, bool write_tracker,
                                                         const CheckpointSaveLayout& layout);
// A converter run by rank 0 at the finalize phase on the complete Strata directory (its first
// argument), writing another format's iteration directory (its second, which must not exist); that
// directory then becomes iter_X (checkpoint.ckpt_format torch_dist).
using CheckpointConverter = std::function<void(const std::string& strata_dir, const std::string& out_dir)>;
void set_checkpoint_converter(CheckpointSaveJob& job, CheckpointConverter convert);
// The write phase: this rank's files (no communication; safe on another thread while training goes on).
void write_checkpoint_files(CheckpointSaveJob& job);
// The finalize phase (collective): returns the final iteration directory.
std::string finalize_checkpoint_save(CheckpointSaveJob& job);
int64_t checkpoint_save_iteration(const CheckpointSaveJob& job);

class AsyncCheckpointWriter {
 public:
  AsyncCheckpointWriter() = default;
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;
  // Waits for a running write; finalizes nothing (the save stays an invisible iter_X.tmp).
  ~AsyncCheckpointWriter();

  // Starts job's write phase on a background thread. No save may be pending.
  void start(CheckpointSaveJobPtr job);
  bool pending() const { return job_ != nullptr; }
  bool ready() const;  // this rank's write has ended (or failed)
  int64_t iteration() const;  // of the pending save
  // Waits for the write, rethrows its error, then finalizes (collective). Returns the directory.
  std::string finalize();

 private:
  CheckpointSaveJobPtr job_;
  std::thread thread_;
  std::exception_ptr error_;
  std::shared_ptr<std::atomic<bool>> done_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace strata
