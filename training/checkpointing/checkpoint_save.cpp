// The collective checkpoint save in phases and the asynchronous writer (see checkpoint_save.h and
// save_checkpoint in checkpoint.h).
// Reference: megatron/training/checkpointing.py (save_checkpoint, the tracker file),
// megatron/core/dist_checkpointing/strategies/async_utils.py (AsyncRequest, AsyncCallsQueue).
#include "training/checkpointing/checkpoint_save.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "models/parameter_names.h"
#include "training/checkpointing/checkpoint_pieces.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/checkpointing/checkpoint_tokenizer.h"
#include "training/checkpointing/checksum.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* kManifestFile = "manifest.json";

// fsync a file or directory by path (best effort on filesystems that refuse directory fsync).
void fsync_path(const fs::path& p, bool is_dir) {
  const int fd = ::open(p.c_str(), is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  STRATA_CHECK(fd >= 0, "checkpoint: cannot open ", p.string(), " to fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  STRATA_CHECK(rc == 0 || is_dir, "checkpoint: fsync failed for ", p.string());
}

void write_text_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  STRATA_CHECK(out.good(), "checkpoint: cannot write ", p.string());
  out << text;
  out.close();
  STRATA_CHECK(!out.fail(), "checkpoint: error writing ", p.string());
}

Tensor host_copy(const Tensor& t) { return t.to(Device::cpu()).contiguous().clone(); }

std::string rank_file(const char* stem, int rank, const std::string& ext) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s_rank_%04d", stem, rank);
  return buf + ext;
}

json box_json(const TensorBox& b) { return {{"offsets", b.offsets}, {"shape", b.shape}}; }

// The pieces one rank writes: file contents and their manifest entries ("tensors" fragment).
struct ShardWriter {
  std::string file;
  std::map<std::string, Tensor> tensors;
  json* table = nullptr;
  // Adds t (shaped like p.value) as the pieces of global tensor `name` (p's boxes), copied to host.
  void add(const std::string& name, const Parameter& p, const Tensor& t) {
    const std::vector<LocalRegion> regions = parameter_regions(p, t);
    json& entry = (*table)[name];
    if (entry.is_null()) {
      entry["shape"] = parameter_global_shape(p).vec();
      entry["dtype"] = dtype_name(t.dtype());
      entry["pieces"] = json::array();
    }
    for (size_t i = 0; i < regions.size(); ++i) {
      const std::string key = regions.size() == 1 ? name : name + "#" + std::to_string(i);
      STRATA_CHECK(!tensors.count(key), "checkpoint: duplicate tensor ", key);
      tensors[key] = host_copy(regions[i].local);
      json piece = box_json(regions[i].box);
      piece["file"] = file;
      piece["key"] = key;
      entry["pieces"].push_back(piece);
    }
  }
};

// Merges the per-rank fragments into one "tensors" table and checks every global tensor is
// covered exactly once (pieces of one tensor never overlap, so their sizes must add up).
json merge_fragments(const std::vector<json>& fragments, json& files) {
  json tensors = json::object();
  for (const json& f : fragments) {
    for (auto it = f.at("files").begin(); it != f.at("files").end(); ++it) files[it.key()] = it.value();
    for (auto it = f.at("tensors").begin(); it != f.at("tensors").end(); ++it) {
      json& e = tensors[it.key()];
      if (e.is_null()) {
        e = it.value();
        continue;
      }
      STRATA_CHECK(e.at("shape") == it.value().at("shape") && e.at("dtype") == it.value().at("dtype"),
                   "checkpoint: ranks disagree on the global shape or dtype of ", it.key(), ": ",
                   e.at("shape").dump(), " ", e.at("dtype").dump(), " vs ", it.value().at("shape").dump(), " ",
                   it.value().at("dtype").dump());
      for (const json& piece : it.value().at("pieces")) e["pieces"].push_back(piece);
    }
  }
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    int64_t global = 1, covered = 0;
    for (int64_t d : it.value().at("shape")) global *= d;
    for (const json& piece : it.value().at("pieces")) {
      int64_t n = 1;
      for (int64_t d : piece.at("shape")) n *= d;
      covered += n;
    }
    STRATA_CHECK(covered == global, "checkpoint: the saved pieces of ", it.key(), " cover ", covered, " of ",
                 global, " elements (a parameter is owned by no rank, or by several)");
  }
  return tensors;
}

}  // namespace

std::string read_checkpoint_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  STRATA_CHECK(in.good(), "checkpoint: cannot read ", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CheckpointSaveJob {
 public:
  CheckpointSaveJob(const std::string& save_dir, const CheckpointState& st, TensorFileIO& io_, bool tracker,
                    const CheckpointSaveLayout& layout_, bool with_optimizer)
      : root(save_dir), state(st), io(io_), write_tracker(tracker), layout(layout_), saved_optimizer(with_optimizer) {
    const std::string name = checkpoint_dir_name(state.iteration);
    final_dir = root / name;
    tmp_dir = root / (name + ".tmp");
  }
  fs::path root, final_dir, tmp_dir;
  CheckpointState state;
  TensorFileIO& io;
  bool write_tracker;
  CheckpointSaveLayout layout;
  bool saved_optimizer;
  json fragment = {{"tensors", json::object()}, {"files", json::object()}};
  ShardWriter model, optim;
  CheckpointConverter convert;  // another format's directory made from the finished one (rank 0)
};

void set_checkpoint_converter(CheckpointSaveJob& job, CheckpointConverter convert) { job.convert = std::move(convert); }

namespace {

void barrier(const CheckpointSaveJob& job) {
  if (job.layout.world.size() > 1) job.layout.world.barrier();
}

// This rank's pieces: what it uniquely owns (dp rank 0; replicated parameters from tp rank 0;
// experts from their expert-dp rank 0), copied to host.
void copy_owned_pieces(CheckpointSaveJob& job, const std::vector<Parameter*>& params, AdamWOptimizer* opt) {
  const CheckpointSaveLayout& layout = job.layout;
  auto owns = [&](const Parameter& p) {
    if (p.expert_parallel) return layout.expert_dp_rank == 0 && (p.tensor_parallel || layout.expert_tp_rank == 0);
    return layout.dp_rank == 0 && !p.shared_copy && (p.tensor_parallel || layout.tp_rank == 0);
  };
  const int rank = layout.world.rank();
  job.model = ShardWriter{rank_file("model", rank, job.io.extension()), {}, &job.fragment["tensors"]};
  job.optim = ShardWriter{rank_file("optimizer", rank, job.io.extension()), {}, &job.fragment["tensors"]};
  // The name map rejects two parameters with one name (and lists each parameter once).
  const CanonicalParameterNameMap names({params}, 0, 1, 0);
  for (Parameter* p : params)
    if (owns(*p)) job.model.add(checkpoint_parameter_name(names.name_of(p)), *p, p->value);
  if (!opt) return;
  for (ParamState& s : opt->checkpoint_states()) {  // full-size (distributed optimizer: gathered)
    const Parameter& p = *s.param;
    if (!owns(p)) continue;
    const Shape& shape = p.value.shape();
    const std::string name = checkpoint_parameter_name(p.name);
    job.optim.add("optimizer.exp_avg." + name, p, s.exp_avg.reshape(shape));
    job.optim.add("optimizer.exp_avg_sq." + name, p, s.exp_avg_sq.reshape(shape));
    if (s.separate_master) job.optim.add("optimizer.master." + name, p, s.master.reshape(shape));
  }
}

// Rank 0's manifest from the merged fragments.
json build_manifest(const CheckpointSaveJob& job, const json& tensors, const json& jfiles) {
  const CheckpointState& state = job.state;
  json manifest;
  manifest["format"] = kCheckpointFormat;
  manifest["version"] = kCheckpointVersion;
  manifest["iteration"] = state.iteration;
  manifest["consumed_samples"] = state.consumed_train_samples;
  manifest["optimizer"] = {{"step_count", state.optimizer_step_count},
                           {"saved", job.saved_optimizer},
                           {"num_skipped_iterations", state.num_skipped_iterations}};
  if (state.lr_scheduler_steps) manifest["optimizer"]["scheduler_steps"] = *state.lr_scheduler_steps;
  if (state.lr_schedule) manifest["optimizer"]["scheduler"] = lr_schedule_json(*state.lr_schedule);
  if (state.loss_scaler)
    manifest["optimizer"]["loss_scaler"] = {{"scale", state.loss_scaler->scale},
                                            {"growth_tracker", state.loss_scaler->growth_tracker},
                                            {"hysteresis_tracker", state.loss_scaler->hysteresis_tracker}};
  manifest["rng"] = {{"kind", "philox-counter"}, {"seed", state.seed}};
  manifest["data"] = {{"consumed_train_samples", state.consumed_train_samples},
                      {"num_evaluations", state.num_evaluations}};
  manifest["config"] = state.config_yaml;
  if (json tok = save_checkpoint_tokenizer(state.config_yaml, job.tmp_dir); !tok.is_null()) manifest["tokenizer"] = tok;
  manifest["saved_world_size"] = job.layout.world.size();
  json jparams = json::array();
  for (auto it = tensors.begin(); it != tensors.end(); ++it)
    if (it.key().rfind("optimizer.", 0) != 0) jparams.push_back(it.key());
  manifest["parameters"] = jparams;
  manifest["tensors"] = tensors;
  manifest["files"] = jfiles;
  return manifest;
}

}  // namespace

CheckpointSaveJobPtr begin_checkpoint_save(const std::string& save_dir, const CheckpointState& state,
                                                         const std::vector<Parameter*>& params, AdamWOptimizer* opt,
                                                         TensorFileIO& io, bool write_tracker,
                                                         const CheckpointSaveLayout& layout) {
  STRATA_CHECK(!save_dir.empty(), "checkpoint: empty save directory");
  CheckpointSaveJobPtr job(new CheckpointSaveJob(save_dir, state, io, write_tracker, layout, opt != nullptr));
  if (layout.world.rank() == 0) {
    fs::create_directories(job->root);
    fs::remove_all(job->tmp_dir);
    fs::create_directories(job->tmp_dir);
  }
  barrier(*job);
  copy_owned_pieces(*job, params, opt);
  return job;
}

void write_checkpoint_files(CheckpointSaveJob& job) {
  const std::map<std::string, std::string> meta{{"format", kCheckpointFormat},
                                                {"iteration", std::to_string(job.state.iteration)}};
  for (ShardWriter* w : {&job.model, &job.optim}) {
    if (w->tensors.empty()) continue;
    const fs::path fp = job.tmp_dir / w->file;
    job.io.write(fp.string(), w->tensors, meta);
    fsync_path(fp, false);
    uint64_t size = 0;
    const uint32_t crc = crc32c_file(fp.string(), &size);
    job.fragment["files"][w->file] = {{"crc32c", crc32c_hex(crc)}, {"bytes", size}};
    w->tensors.clear();  // the host copies are no longer needed
  }
  const fs::path fragment_path = job.tmp_dir / ("shard_rank_" + std::to_string(job.layout.world.rank()) + ".json");
  write_text_file(fragment_path, job.fragment.dump());
  fsync_path(fragment_path, false);
}

std::string finalize_checkpoint_save(CheckpointSaveJob& job) {
  barrier(job);  // every rank's files are written
  if (job.layout.world.rank() == 0) {
    std::vector<json> fragments;
    for (int r = 0; r < job.layout.world.size(); ++r) {
      const fs::path fp = job.tmp_dir / ("shard_rank_" + std::to_string(r) + ".json");
      STRATA_CHECK(fs::exists(fp), "checkpoint: rank ", r, " wrote no ", fp.string());
      fragments.push_back(json::parse(read_checkpoint_text(fp)));
      fs::remove(fp);
    }
    json jfiles = json::object();
    const json tensors = merge_fragments(fragments, jfiles);
    write_text_file(job.tmp_dir / kManifestFile, build_manifest(job, tensors, jfiles).dump(1) + "\n");
    fsync_path(job.tmp_dir / kManifestFile, false);
    fsync_path(job.tmp_dir, true);
    if (job.convert) {  // e.g. Megatron torch_dist: written beside, then it replaces the Strata files
      const fs::path converted = job.root / (job.final_dir.filename().string() + ".convert.tmp");
      if (fs::exists(converted)) fs::remove_all(converted);
      job.convert(job.tmp_dir.string(), converted.string());
      fsync_path(converted, true);
      fs::remove_all(job.tmp_dir);
      fs::rename(converted, job.tmp_dir);
    }
    if (fs::exists(job.final_dir)) fs::remove_all(job.final_dir);
    fs::rename(job.tmp_dir, job.final_dir);
    fsync_path(job.root, true);
  }
  barrier(job);
  // Tracker last, atomically, once every rank's files are in place.
  if (job.write_tracker && job.layout.world.rank() == 0) write_checkpoint_tracker(job.root.string(), job.state.iteration);
  if (job.write_tracker) barrier(job);
  return job.final_dir.string();
}

int64_t checkpoint_save_iteration(const CheckpointSaveJob& job) { return job.state.iteration; }

void CheckpointSaveJobDeleter::operator()(CheckpointSaveJob* job) const { delete job; }

std::string save_checkpoint(const std::string& save_dir, const CheckpointState& state,
                            const std::vector<Parameter*>& params, AdamWOptimizer* opt, TensorFileIO& io,
                            bool write_tracker, const CheckpointSaveLayout& layout) {
  CheckpointSaveJobPtr job = begin_checkpoint_save(save_dir, state, params, opt, io, write_tracker, layout);
  write_checkpoint_files(*job);
  return finalize_checkpoint_save(*job);
}

void write_checkpoint_tracker(const std::string& save_dir, int64_t iteration) {
  const fs::path root(save_dir);
  fs::create_directories(root);
  const fs::path tracker_tmp = root / (std::string(kTrackerFile) + ".tmp");
  write_text_file(tracker_tmp, std::to_string(iteration));
  fsync_path(tracker_tmp, false);
  fs::rename(tracker_tmp, root / kTrackerFile);
  fsync_path(root, true);
}

// ---- the asynchronous writer ----------------------------------------------------------------

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void AsyncCheckpointWriter::start(CheckpointSaveJobPtr job) {
  STRATA_CHECK(!job_, "checkpoint: an asynchronous save is already pending (finalize it first)");
  job_ = std::move(job);
  error_ = nullptr;
  done_ = std::make_shared<std::atomic<bool>>(false);
  thread_ = std::thread([job = job_.get(), done = done_, error = &error_] {
    try {
      write_checkpoint_files(*job);
    } catch (...) {
      *error = std::current_exception();  // read by finalize() after the join
    }
    done->store(true, std::memory_order_release);
  });
}

bool AsyncCheckpointWriter::ready() const { return job_ && done_->load(std::memory_order_acquire); }

int64_t AsyncCheckpointWriter::iteration() const {
  STRATA_CHECK(job_ != nullptr, "checkpoint: no asynchronous save is pending");
  return checkpoint_save_iteration(*job_);
}

std::string AsyncCheckpointWriter::finalize() {
  STRATA_CHECK(job_ != nullptr, "checkpoint: no asynchronous save is pending");
  if (thread_.joinable()) thread_.join();
  CheckpointSaveJobPtr job = std::move(job_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return finalize_checkpoint_save(*job);
}

}  // namespace strata
