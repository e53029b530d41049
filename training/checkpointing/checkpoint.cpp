// Megatron-layout sharded checkpoints with a JSON manifest and CRC-32C checksums (see checkpoint.h):
// the tracker and the layout-independent load (version 2 pieces, version 1 whole tensors); the
// collective save (per-rank shard files, manifest merged by rank 0) is checkpoint_save.cpp.
#include "training/checkpointing/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "models/layers/moe/router.h"
#include "models/parameter_names.h"
#include "training/checkpointing/checkpoint_pieces.h"
#include "training/checkpointing/checkpoint_save.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/checkpointing/checksum.h"
#include "training/checkpointing/checkpoint_tokenizer.h"
#include "training/checkpointing/contained_path.h"
#include "training/checkpointing/megatron/megatron_checkpoint.h"
#include "training/checkpointing/megatron/megatron_legacy_read.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* kManifestFile = "manifest.json";

// ---- reading a manifest: every member checked, errors naming the file and the member ----------

template <typename T>
bool json_holds(const json& j) {
  if constexpr (std::is_same_v<T, bool>) return j.is_boolean();
  else if constexpr (std::is_same_v<T, std::string>) return j.is_string();
  else if constexpr (std::is_unsigned_v<T>) return j.is_number_unsigned();
  else if constexpr (std::is_integral_v<T>) return j.is_number_integer();
  else return j.is_number();
}

template <typename T>
const char* json_type_word() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_unsigned_v<T>) return "a non-negative integer";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else return "a number";
}

// Member `key` of `obj` as T. `name` is its path in the manifest for messages ("optimizer.step_count").
// Missing (and no fallback) or of another type: an error naming the manifest and the member, where
// nlohmann's own (type_error.302, out_of_range.403) would name neither.
template <typename T>
T manifest_member(const json& obj, const std::string& key, const std::string& name, const fs::path& file,
                  std::optional<T> fallback = std::nullopt) {
  if (!obj.is_object() || !obj.contains(key)) {
    if (fallback) return *fallback;
    STRATA_THROW("checkpoint: ", file.string(), " has no \"", name, "\"");
  }
  const json& j = obj.at(key);
  STRATA_CHECK(json_holds<T>(j), "checkpoint: ", file.string(), ": \"", name, "\" is ", j.dump(), ", not ",
               json_type_word<T>());
  return j.get<T>();
}

// Member `key` of `obj`, which must be a JSON object.
const json& manifest_object(const json& obj, const std::string& key, const std::string& name, const fs::path& file) {
  STRATA_CHECK(obj.is_object() && obj.contains(key), "checkpoint: ", file.string(), " has no \"", name, "\"");
  const json& j = obj.at(key);
  STRATA_CHECK(j.is_object(), "checkpoint: ", file.string(), ": \"", name, "\" is ", j.type_name(), ", not an object");
  return j;
}

using Piece = StoredPiece;
using TensorEntry = StoredTensor;

std::string shape_str(const std::vector<int64_t>& s) { return Shape(s).str(); }

// Up to 8 names, then how many more.
std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 8) s += ", … (" + std::to_string(names.size() - 8) + " more)";
  return s;
}

}  // namespace

std::vector<Parameter*> checkpoint_tensors(const std::vector<LanguageModel*>& chunks) {
  std::vector<Parameter*> out;
  for (LanguageModel* chunk : chunks)
    for (Parameter* p : chunk->parameters()) out.push_back(p);
  for (LanguageModel* chunk : chunks)
    for (const MoeRouterRef& r : chunk->moe_routers()) r.router->collect_buffers(out);
  return out;
}

std::string checkpoint_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

std::optional<int64_t> read_checkpoint_tracker(const std::string& dir) {
  const fs::path p = fs::path(dir) / kTrackerFile;
  if (!fs::exists(p)) return std::nullopt;
  std::string text = read_checkpoint_text(p);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  STRATA_CHECK(text != "release", "checkpoint: ", p.string(), " says 'release', which is not supported");
  try {
    size_t used = 0;
    const long long it = std::stoll(text, &used);
    STRATA_CHECK(used == text.size() && it >= 0, "bad value");
    return static_cast<int64_t>(it);
  } catch (const std::exception&) {
    STRATA_CHECK(false, "checkpoint: ", p.string(), " does not hold an iteration number: '", text, "'");
  }
  return std::nullopt;
}

namespace {

// One checkpoint directory being read: its manifest (format and version checked), the shard files
// read so far and the table of global tensors. Not copyable: `files` points into `manifest`.
struct CheckpointReader {
  fs::path dir, manifest_path;
  TensorFileIO& io;
  json manifest;
  int64_t version = 0;
  const json* files = nullptr;  // the manifest's "files" object
  std::map<std::string, TensorFileContents> cache;
  StoredTensorTable table;

  CheckpointReader(fs::path dir_, TensorFileIO& io_) : dir(std::move(dir_)), manifest_path(dir / kManifestFile), io(io_) {}
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  void read_manifest();
  const std::map<std::string, Tensor>& file_tensors(const std::string& f);
  void add_whole_tensors(const std::string& f);
  void read_tensor_table();
  bool check_shape(const std::string& name, const Parameter& p, bool vocab_padding_may_differ) const;
  void load_tensor(const std::string& name, const Parameter& p, const Tensor& t, bool vocab_padding_may_differ);
};

// The manifest: valid JSON, this format, version 1 or 2, a "files" object.
void CheckpointReader::read_manifest() {
  try {
    manifest = json::parse(read_checkpoint_text(manifest_path));
  } catch (const json::exception& e) {
    STRATA_CHECK(false, "checkpoint: ", manifest_path.string(), " is not valid JSON: ", e.what());
  }
  STRATA_CHECK(manifest.is_object() && manifest.contains("format") && manifest.at("format").is_string() &&
                   manifest.at("format").get<std::string>() == kCheckpointFormat,
               "checkpoint: ", manifest_path.string(), " is not a ", kCheckpointFormat, " manifest");
  version = manifest_member<int64_t>(manifest, "version", "version", manifest_path, int64_t{0});
  STRATA_CHECK(version == 1 || version == 2, "checkpoint: ", manifest_path.string(), " has version ", version,
               ", this build reads versions 1 and 2");
  files = &manifest_object(manifest, "files", "files", manifest_path);
}

// Shard file f's tensors, read on first use (only those holding pieces this rank needs), verified
// against the manifest's size and CRC-32C first.
const std::map<std::string, Tensor>& CheckpointReader::file_tensors(const std::string& f) {
  auto hit = cache.find(f);
  if (hit != cache.end()) return hit->second.tensors;
  STRATA_CHECK(files->contains(f), "checkpoint: ", f, " is not listed in ", manifest_path.string());
  const json& jf = manifest_object(*files, f, "files." + f, manifest_path);
  const uint64_t want_size = manifest_member<uint64_t>(jf, "bytes", "files." + f + ".bytes", manifest_path);
  const std::string want_crc = manifest_member<std::string>(jf, "crc32c", "files." + f + ".crc32c", manifest_path);
  const fs::path fp = contained_path(dir, f, manifest_path.string(), "a \"files\" entry");
  STRATA_CHECK(fs::exists(fp), "checkpoint: file ", fp.string(), " listed in the manifest is missing");
  uint64_t size = 0;
  const uint32_t crc = crc32c_file(fp.string(), &size);
  STRATA_CHECK(size == want_size, "checkpoint: file ", fp.string(), " is truncated or corrupt: ", size,
               " bytes, the manifest says ", want_size);
  STRATA_CHECK(crc32c_hex(crc) == want_crc, "checkpoint: checksum mismatch in ", fp.string(), ": crc32c ",
               crc32c_hex(crc), ", the manifest says ", want_crc);
  TensorFileContents c;
  try {
    c = io.read(fp.string());
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (msg.find(fp.string()) != std::string::npos) throw;
    STRATA_CHECK(false, "checkpoint: cannot read ", fp.string(), ": ", msg);
  }
  return cache.emplace(f, std::move(c)).first->second.tensors;
}

// Version 1: every tensor of file f whole (one piece each) into the table.
void CheckpointReader::add_whole_tensors(const std::string& f) {
  for (const auto& [key, t] : file_tensors(f)) {
    TensorEntry e;
    e.shape = t.shape().vec();
    e.pieces.push_back({f, key, {std::vector<int64_t>(e.shape.size(), 0), e.shape}, {}});
    table[key] = std::move(e);
  }
}

// The table of global tensors: version 2 lists it; version 1 is every tensor of model<ext> /
// optimizer<ext> whole (the optimizer file is added when the optimizer state is loaded).
void CheckpointReader::read_tensor_table() {
  if (version != 2) {
    add_whole_tensors("model" + io.extension());
    return;
  }
  try {
    for (auto it = manifest.at("tensors").begin(); it != manifest.at("tensors").end(); ++it) {
      TensorEntry e;
      e.shape = it.value().at("shape").get<std::vector<int64_t>>();
      for (const json& jp : it.value().at("pieces")) {
        Piece piece{jp.at("file").get<std::string>(), jp.at("key").get<std::string>(),
                    {jp.at("offsets").get<std::vector<int64_t>>(), jp.at("shape").get<std::vector<int64_t>>()}, {}};
        STRATA_CHECK(piece.box.offsets.size() == e.shape.size() && piece.box.shape.size() == e.shape.size(),
                     "checkpoint: ", manifest_path.string(), ": a piece of ", it.key(), " has ",
                     piece.box.shape.size(), " dimensions, the tensor ", e.shape.size());
        e.pieces.push_back(std::move(piece));
      }
      table[it.key()] = std::move(e);
    }
  } catch (const json::exception& e) {
    STRATA_CHECK(false, "checkpoint: ", manifest_path.string(), " has a malformed tensor table: ", e.what());
  }
}

// Fills t (shaped like p.value: the value or an optimizer state) with its boxes of global tensor
// `name` from every piece that intersects them.
// Tensor `name` is in the checkpoint with p's global shape (or, for weights-only readers, another
// vocabulary padding: only dimension 0 of a vocab tensor differs, returned true).
bool CheckpointReader::check_shape(const std::string& name, const Parameter& p, bool vocab_padding_may_differ) const {
  auto it = table.find(name);
  STRATA_CHECK(it != table.end(), "checkpoint: tensor '", name, "' is missing from ", dir.string());
  const TensorEntry& e = it->second;
  const Shape want = parameter_global_shape(p);
  const bool vocab_rows = vocab_padding_may_differ && Shape(e.shape) != want && want.ndim() == 2 &&
                          e.shape.size() == 2 && e.shape[1] == want[1] && p.vocab_rows;
  STRATA_CHECK(Shape(e.shape) == want || vocab_rows, "checkpoint: tensor '", name, "' has global shape ",
               shape_str(e.shape), " in ", dir.string(), ", the model expects ", want.str());
  return vocab_rows;
}

void CheckpointReader::load_tensor(const std::string& name, const Parameter& p, const Tensor& t,
                                   bool vocab_padding_may_differ) {
  const bool vocab_rows = check_shape(name, p, vocab_padding_may_differ);
  const TensorEntry& e = table.at(name);
  for (const LocalRegion& r : parameter_regions(p, t)) {
    int64_t expected = r.box.numel();
    if (vocab_rows) {
      Tensor(r.local).fill_(0.0);  // a view: zeroes the rows the checkpoint lacks
      const int64_t rows = std::max<int64_t>(0, std::min(r.box.offsets[0] + r.box.shape[0], e.shape[0]) - r.box.offsets[0]);
      expected = rows * r.box.shape[1];
    }
    int64_t covered = 0;
    for (const Piece& piece : e.pieces) {
      if (!intersect_boxes(piece.box, r.box)) continue;
      Tensor fetched;
      if (piece.fetch) {
        fetched = piece.fetch();
      } else {
        const auto& tensors = file_tensors(piece.file);
        auto src = tensors.find(piece.key);
        STRATA_CHECK(src != tensors.end(), "checkpoint: tensor '", piece.key, "' is missing from ",
                     (dir / piece.file).string());
        fetched = src->second;
      }
      STRATA_CHECK(fetched.shape() == Shape(piece.box.shape), "checkpoint: tensor '", piece.key, "' in ",
                   (dir / piece.file).string(), " has shape ", fetched.shape().str(), ", the manifest says ",
                   shape_str(piece.box.shape));
      covered += copy_box_intersection(fetched, piece.box, r.local, r.box);
    }
    STRATA_CHECK(covered == expected, "checkpoint: the pieces of '", name, "' in ", manifest_path.string(),
                 " cover ", covered, " of the ", expected, " elements of ", r.box.str());
  }
}

// The run state, checked before any tensor is read: the counters (non-negative), the loss scaler,
// the scheduler steps, the RNG seed and the config; the iteration must be the directory's.
// `saved_optim`: whether the checkpoint holds optimizer state.
CheckpointState read_run_state(const json& manifest, const fs::path& manifest_path, int64_t iteration,
                               bool& saved_optim) {
  CheckpointState st;
  const json& jopt = manifest_object(manifest, "optimizer", "optimizer", manifest_path);
  const json& jdata = manifest_object(manifest, "data", "data", manifest_path);
  const json& jrng = manifest_object(manifest, "rng", "rng", manifest_path);
  st.iteration = manifest_member<int64_t>(manifest, "iteration", "iteration", manifest_path);
  st.consumed_train_samples = manifest_member<int64_t>(manifest, "consumed_samples", "consumed_samples", manifest_path);
  st.optimizer_step_count = manifest_member<int64_t>(jopt, "step_count", "optimizer.step_count", manifest_path);
  st.num_skipped_iterations = manifest_member<int64_t>(jopt, "num_skipped_iterations",
                                                       "optimizer.num_skipped_iterations", manifest_path, int64_t{0});
  st.num_evaluations =
      manifest_member<int64_t>(jdata, "num_evaluations", "data.num_evaluations", manifest_path, int64_t{0});
  if (jopt.contains("loss_scaler")) {
    const json& ls = manifest_object(jopt, "loss_scaler", "optimizer.loss_scaler", manifest_path);
    st.loss_scaler = LossScalerState{
        manifest_member<double>(ls, "scale", "optimizer.loss_scaler.scale", manifest_path),
        manifest_member<int64_t>(ls, "growth_tracker", "optimizer.loss_scaler.growth_tracker", manifest_path),
        manifest_member<int64_t>(ls, "hysteresis_tracker", "optimizer.loss_scaler.hysteresis_tracker", manifest_path)};
  }
  if (jopt.contains("scheduler_steps"))
    st.lr_scheduler_steps = manifest_member<int64_t>(jopt, "scheduler_steps", "optimizer.scheduler_steps", manifest_path);
  if (jopt.contains("scheduler")) st.lr_schedule = lr_schedule_from_json(jopt.at("scheduler"), manifest_path);
  st.seed = manifest_member<uint64_t>(jrng, "seed", "rng.seed", manifest_path);
  st.config_yaml = manifest_member<std::string>(manifest, "config", "config", manifest_path, std::string());
  saved_optim = manifest_member<bool>(jopt, "saved", "optimizer.saved", manifest_path, false);
  STRATA_CHECK(st.iteration == iteration, "checkpoint: ", manifest_path.string(), " says iteration ", st.iteration,
               ", but its directory is ", checkpoint_dir_name(iteration), " (iteration ", iteration, ")");
  const std::pair<const char*, int64_t> counters[] = {{"consumed_samples", st.consumed_train_samples},
                                                      {"optimizer.step_count", st.optimizer_step_count},
                                                      {"optimizer.num_skipped_iterations", st.num_skipped_iterations},
                                                      {"data.num_evaluations", st.num_evaluations},
                                                      {"optimizer.scheduler_steps", st.lr_scheduler_steps.value_or(0)}};
  for (const auto& [name, v] : counters)
    STRATA_CHECK(v >= 0, "checkpoint: ", manifest_path.string(), ": \"", name, "\" is ", v, ", not >= 0");
  return st;
}

// The tensor sets: this model's against the checkpoint's (finetune: listed in st and skipped;
// otherwise a difference is an error). Returns the parameters the checkpoint holds.
std::vector<Parameter*> match_model_tensors(const CheckpointReader& ckpt, const std::vector<Parameter*>& params,
                                            const CheckpointLoadOptions& options, CheckpointState& st) {
  std::vector<Parameter*> present;
  std::set<std::string> wanted;
  for (Parameter* p : params) {
    const std::string name = checkpoint_parameter_name(p->name);
    wanted.insert(name);
    if (ckpt.table.count(name))
      present.push_back(p);
    else
      st.finetune_missing.push_back(name);
  }
  if (options.holds_whole_model)
    for (const auto& [name, e] : ckpt.table)
      if (name.rfind("optimizer.", 0) != 0 && !wanted.count(name)) st.finetune_unused.push_back(name);
  if (options.finetune) return present;
  using M = CheckpointLoadOptions::Mismatch;
  STRATA_CHECK(options.absent_from_checkpoint != M::Error || st.finetune_missing.empty(), "checkpoint: ",
               st.finetune_missing.size(), " tensor(s) of this model are missing from ", ckpt.dir.string(), ": ",
               name_list(st.finetune_missing), " (set checkpoint.finetune=true to start them from their initialisation)");
  STRATA_CHECK(options.absent_from_model != M::Error || st.finetune_unused.empty(), "checkpoint: ",
               ckpt.dir.string(), " holds ", st.finetune_unused.size(),
               " tensor(s) this model does not have: ", name_list(st.finetune_unused),
               " (set checkpoint.finetune=true to load only the tensors the two models share)");
  st.absent = std::set<std::string>(st.finetune_missing.begin(), st.finetune_missing.end());
  if (options.absent_from_checkpoint == M::Ignore) st.finetune_missing.clear();
  if (options.absent_from_model == M::Ignore) st.finetune_unused.clear();
  return present;
}

// The optimizer state: loaded (Adam moments, f32 masters, step count) when asked for and not a
// finetune, else started afresh from the loaded values (zero moments, step 0).
void load_optimizer_state(CheckpointReader& ckpt, AdamWOptimizer& opt, const CheckpointLoadOptions& options,
                          bool saved_optim, CheckpointState& st) {
  if (!options.load_optimizer || options.finetune) {
    opt.reset_masters_from_values();
    for (ParamState& s : opt.states()) {
      s.exp_avg.zero_();
      s.exp_avg_sq.zero_();
    }
    opt.set_step_count(0);
    st.optimizer_step_count = 0;
    return;
  }
  STRATA_CHECK(saved_optim, "checkpoint: ", ckpt.dir.string(),
               " has no optimizer state (set checkpoint.no_load_optim to load weights only)");
  if (ckpt.version == 1) ckpt.add_whole_tensors("optimizer" + ckpt.io.extension());
  const bool vocab = options.vocab_padding_may_differ;
  for (ParamState& s : opt.checkpoint_states()) {  // full-size (distributed: prepared, then scattered)
    const Parameter& p = *s.param;
    const Shape& shape = p.value.shape();
    const std::string name = checkpoint_parameter_name(p.name);
    if (st.absent.count(name)) {  // kept at its initialisation (dist_ckpt_strictness): fresh state
      s.exp_avg.zero_();
      s.exp_avg_sq.zero_();
      if (s.separate_master) s.master.copy_(p.value.flatten());
      continue;
    }
    ckpt.load_tensor("optimizer.exp_avg." + name, p, s.exp_avg.reshape(shape), vocab);
    ckpt.load_tensor("optimizer.exp_avg_sq." + name, p, s.exp_avg_sq.reshape(shape), vocab);
    const std::string master = "optimizer.master." + name;
    if (ckpt.table.count(master))  // (also bf16 saved, fp32 loaded: the f32 master is the value)
      ckpt.load_tensor(master, p, s.master.reshape(shape), vocab);
    else if (s.separate_master)
      s.master.copy_(p.value.flatten());
  }
  opt.set_step_count(st.optimizer_step_count);
}

}  // namespace

CheckpointState load_checkpoint(const std::string& load_dir, const std::vector<Parameter*>& params,
                                AdamWOptimizer* opt, TensorFileIO& io, const CheckpointLoadOptions& options,
                                std::optional<int64_t> iteration) {
  if (!iteration) iteration = read_checkpoint_tracker(load_dir);
  STRATA_CHECK(iteration.has_value(), "checkpoint: no ", kTrackerFile, " in ", load_dir);
  CheckpointReader ckpt(fs::path(load_dir) / checkpoint_dir_name(*iteration), io);
  STRATA_CHECK(fs::is_directory(ckpt.dir), "checkpoint: directory ", ckpt.dir.string(), " does not exist");
  bool saved_optim = false;
  CheckpointState st;
  if (const CheckpointFormat format = detect_checkpoint_format(ckpt.dir.string());
      format == CheckpointFormat::MegatronTorchDist || format == CheckpointFormat::MegatronTorch) {
    MegatronCheckpoint m = format == CheckpointFormat::MegatronTorchDist ? read_megatron_torch_dist(ckpt.dir.string(), params)
                                                                         : read_megatron_legacy(ckpt.dir.string(), params);
    STRATA_CHECK(m.state.iteration == *iteration, "checkpoint: ", ckpt.dir.string(), " says iteration ",
                 m.state.iteration, " in its saved state");
    st = std::move(m.state);
    ckpt.table = std::move(m.table);
    ckpt.version = 2;
    saved_optim = m.has_optimizer;
  } else {
    ckpt.read_manifest();
    st = read_run_state(ckpt.manifest, ckpt.manifest_path, *iteration, saved_optim);
    ckpt.read_tensor_table();
  }
  // Every tensor's presence and shape first (the optimizer's states too): a checkpoint that does not
  // fit is refused before anything is loaded, never half-way.
  const std::vector<Parameter*> present = match_model_tensors(ckpt, params, options, st);
  const bool vocab = options.vocab_padding_may_differ;
  for (Parameter* p : present) ckpt.check_shape(checkpoint_parameter_name(p->name), *p, vocab);
  if (opt && options.load_optimizer && !options.finetune && saved_optim && ckpt.version == 2)
    for (ParamState& s : opt->checkpoint_states()) {
      const std::string name = checkpoint_parameter_name(s.param->name);
      if (st.absent.count(name)) continue;
      ckpt.check_shape("optimizer.exp_avg." + name, *s.param, vocab);
      ckpt.check_shape("optimizer.exp_avg_sq." + name, *s.param, vocab);
    }
  for (Parameter* p : present) ckpt.load_tensor(checkpoint_parameter_name(p->name), *p, p->value, vocab);
  ckpt.cache.clear();  // the model files are no longer needed
  if (opt) load_optimizer_state(ckpt, *opt, options, saved_optim, st);
  if (options.finetune) {
    st.iteration = 0;
    st.consumed_train_samples = 0;
    st.num_skipped_iterations = 0;
    st.num_evaluations = 0;
    st.optimizer_step_count = 0;
  }
  return st;
}

struct CheckpointTensorReader::Impl {
  CheckpointReader ckpt;
  CheckpointState state;
  Impl(const fs::path& dir, TensorFileIO& io) : ckpt(dir, io) {}
};

CheckpointTensorReader::CheckpointTensorReader(const std::string& iteration_dir, TensorFileIO& io)
    : impl_(std::make_unique<Impl>(fs::path(iteration_dir), io)) {
  impl_->ckpt.read_manifest();
  bool saved_optim = false;
  const int64_t iteration = manifest_member<int64_t>(impl_->ckpt.manifest, "iteration", "iteration", impl_->ckpt.manifest_path);
  impl_->state = read_run_state(impl_->ckpt.manifest, impl_->ckpt.manifest_path, iteration, saved_optim);
  impl_->ckpt.read_tensor_table();
  if (saved_optim && impl_->ckpt.version == 1) impl_->ckpt.add_whole_tensors("optimizer" + io.extension());
}

CheckpointTensorReader::~CheckpointTensorReader() = default;

std::vector<std::pair<std::string, std::vector<int64_t>>> CheckpointTensorReader::tensors() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& [name, e] : impl_->ckpt.table) out.emplace_back(name, e.shape);
  return out;
}

Tensor CheckpointTensorReader::read(const std::string& name) {
  auto it = impl_->ckpt.table.find(name);
  STRATA_CHECK(it != impl_->ckpt.table.end(), "checkpoint: tensor '", name, "' is missing from ", impl_->ckpt.dir.string());
  const TensorEntry& e = it->second;
  Tensor out;
  const TensorBox whole{std::vector<int64_t>(e.shape.size(), 0), e.shape};
  int64_t covered = 0;
  for (const Piece& piece : e.pieces) {
    const auto& tensors = impl_->ckpt.file_tensors(piece.file);
    auto src = tensors.find(piece.key);
    STRATA_CHECK(src != tensors.end(), "checkpoint: tensor '", piece.key, "' is missing from ",
                 (impl_->ckpt.dir / piece.file).string());
    if (!out.defined()) out = Tensor::zeros(Shape(e.shape), src->second.dtype());
    covered += copy_box_intersection(src->second, piece.box, out, whole);
  }
  STRATA_CHECK(out.defined() && covered == out.numel(), "checkpoint: the pieces of '", name, "' in ",
               impl_->ckpt.manifest_path.string(), " cover ", covered, " of its elements");
  return out;
}

const CheckpointState& CheckpointTensorReader::state() const { return impl_->state; }

}  // namespace strata
