// Megatron-layout checkpoints with a JSON manifest and CRC-32C checksums (see checkpoint.h).
#include "training/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "training/checksum.h"

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

std::string read_text_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  STRATA_CHECK(in.good(), "checkpoint: cannot read ", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

Tensor host_copy(const Tensor& t, const Shape& shape) { return t.to(Device::cpu()).contiguous().reshape(shape).clone(); }

// Copy a checkpoint tensor into dst (any dtype/device), checking the element count.
void load_into(Tensor dst, const std::map<std::string, Tensor>& tensors, const std::string& name,
               const std::string& file) {
  auto it = tensors.find(name);
  STRATA_CHECK(it != tensors.end(), "checkpoint: tensor '", name, "' is missing from ", file);
  STRATA_CHECK(it->second.numel() == dst.numel(), "checkpoint: tensor '", name, "' in ", file, " has shape ",
               it->second.shape().str(), ", the model expects ", dst.numel(), " elements (",
               dst.shape().str(), ")");
  dst.copy_(it->second.contiguous().reshape(dst.shape()));
}

}  // namespace

std::string checkpoint_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

std::optional<int64_t> read_checkpoint_tracker(const std::string& dir) {
  const fs::path p = fs::path(dir) / kTrackerFile;
  if (!fs::exists(p)) return std::nullopt;
  std::string text = read_text_file(p);
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

std::string save_checkpoint(const std::string& save_dir, const CheckpointState& state,
                            const std::vector<Parameter*>& params, AdamWOptimizer* opt, TensorFileIO& io,
                            bool write_tracker) {
  STRATA_CHECK(!save_dir.empty(), "checkpoint: empty save directory");
  const fs::path root(save_dir);
  fs::create_directories(root);
  const std::string name = checkpoint_dir_name(state.iteration);
  const fs::path final_dir = root / name;
  const fs::path tmp_dir = root / (name + ".tmp");
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);

  const std::string file_meta_iter = std::to_string(state.iteration);
  const std::map<std::string, std::string> meta{{"format", kCheckpointFormat}, {"iteration", file_meta_iter}};

  std::map<std::string, Tensor> model;
  for (Parameter* p : params) {
    STRATA_CHECK(!model.count(p->name), "checkpoint: duplicate parameter name ", p->name);
    model[p->name] = host_copy(p->value, p->value.shape());
  }
  const std::string model_file = "model" + io.extension();
  io.write((tmp_dir / model_file).string(), model, meta);
  std::vector<std::string> files{model_file};

  if (opt) {
    std::map<std::string, Tensor> optim;
    for (ParamState& s : opt->checkpoint_states()) {  // full-size (distributed optimizer: gathered)
      const Shape& shape = s.param->value.shape();
      optim["optimizer.exp_avg." + s.param->name] = host_copy(s.exp_avg, shape);
      optim["optimizer.exp_avg_sq." + s.param->name] = host_copy(s.exp_avg_sq, shape);
      if (s.separate_master) optim["optimizer.master." + s.param->name] = host_copy(s.master, shape);
    }
    const std::string optim_file = "optimizer" + io.extension();
    io.write((tmp_dir / optim_file).string(), optim, meta);
    files.push_back(optim_file);
  }

  json manifest;
  manifest["format"] = kCheckpointFormat;
  manifest["version"] = kCheckpointVersion;
  manifest["iteration"] = state.iteration;
  manifest["consumed_samples"] = state.consumed_train_samples;
  manifest["optimizer"] = {{"step_count", state.optimizer_step_count},
                           {"saved", opt != nullptr},
                           {"num_skipped_iterations", state.num_skipped_iterations}};
  manifest["rng"] = {{"kind", "philox-counter"}, {"seed", state.seed}};
  manifest["data"] = {{"consumed_train_samples", state.consumed_train_samples},
                      {"num_evaluations", state.num_evaluations}};
  manifest["config"] = state.config_yaml;
  json jfiles = json::object();
  json jparams = json::array();
  for (Parameter* p : params) jparams.push_back(p->name);
  manifest["parameters"] = jparams;
  for (const std::string& f : files) {
    const fs::path fp = tmp_dir / f;
    fsync_path(fp, false);
    uint64_t size = 0;
    const uint32_t crc = crc32c_file(fp.string(), &size);
    jfiles[f] = {{"crc32c", hex32(crc)}, {"bytes", size}};
  }
  manifest["files"] = jfiles;
  write_text_file(tmp_dir / kManifestFile, manifest.dump(2) + "\n");
  fsync_path(tmp_dir / kManifestFile, false);
  fsync_path(tmp_dir, true);

  if (fs::exists(final_dir)) fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  fsync_path(root, true);

  // Tracker last, atomically.
  if (write_tracker) write_checkpoint_tracker(save_dir, state.iteration);
  return final_dir.string();
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

CheckpointState load_checkpoint(const std::string& load_dir, const std::vector<Parameter*>& params,
                                AdamWOptimizer* opt, TensorFileIO& io, const CheckpointLoadOptions& options,
                                std::optional<int64_t> iteration) {
  if (!iteration) iteration = read_checkpoint_tracker(load_dir);
  STRATA_CHECK(iteration.has_value(), "checkpoint: no ", kTrackerFile, " in ", load_dir);
  const fs::path dir = fs::path(load_dir) / checkpoint_dir_name(*iteration);
  STRATA_CHECK(fs::is_directory(dir), "checkpoint: directory ", dir.string(), " does not exist");

  const fs::path manifest_path = dir / kManifestFile;
  json manifest;
  try {
    manifest = json::parse(read_text_file(manifest_path));
  } catch (const json::exception& e) {
    STRATA_CHECK(false, "checkpoint: ", manifest_path.string(), " is not valid JSON: ", e.what());
  }
  STRATA_CHECK(manifest.value("format", std::string()) == kCheckpointFormat, "checkpoint: ",
               manifest_path.string(), " is not a ", kCheckpointFormat, " manifest");
  STRATA_CHECK(manifest.value("version", 0) == kCheckpointVersion, "checkpoint: ", manifest_path.string(),
               " has version ", manifest.value("version", 0), ", this build reads version ", kCheckpointVersion);

  // Verify every listed file before reading any tensor.
  const json& jfiles = manifest.at("files");
  for (auto it = jfiles.begin(); it != jfiles.end(); ++it) {
    const fs::path fp = dir / it.key();
    STRATA_CHECK(fs::exists(fp), "checkpoint: file ", fp.string(), " listed in the manifest is missing");
    uint64_t size = 0;
    const uint32_t crc = crc32c_file(fp.string(), &size);
    const uint64_t want_size = it.value().at("bytes").get<uint64_t>();
    STRATA_CHECK(size == want_size, "checkpoint: file ", fp.string(), " is truncated or corrupt: ", size,
                 " bytes, the manifest says ", want_size);
    const std::string want_crc = it.value().at("crc32c").get<std::string>();
    STRATA_CHECK(hex32(crc) == want_crc, "checkpoint: checksum mismatch in ", fp.string(), ": crc32c ",
                 hex32(crc), ", the manifest says ", want_crc);
  }

  auto read_file = [&](const std::string& f) {
    STRATA_CHECK(jfiles.contains(f), "checkpoint: ", f, " is not listed in ", manifest_path.string());
    const std::string path = (dir / f).string();
    try {
      return io.read(path);
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      if (msg.find(path) != std::string::npos) throw;
      STRATA_CHECK(false, "checkpoint: cannot read ", path, ": ", msg);
    }
    return TensorFileContents{};
  };

  const std::string model_file = "model" + io.extension();
  const TensorFileContents model = read_file(model_file);
  for (Parameter* p : params) load_into(p->value, model.tensors, p->name, model_file);

  CheckpointState st;
  st.iteration = manifest.at("iteration").get<int64_t>();
  st.consumed_train_samples = manifest.at("consumed_samples").get<int64_t>();
  st.optimizer_step_count = manifest.at("optimizer").at("step_count").get<int64_t>();
  st.num_skipped_iterations = manifest.at("optimizer").value("num_skipped_iterations", int64_t{0});
  st.num_evaluations = manifest.at("data").value("num_evaluations", int64_t{0});
  st.seed = manifest.at("rng").at("seed").get<uint64_t>();
  st.config_yaml = manifest.value("config", std::string());

  const bool saved_optim = manifest.at("optimizer").value("saved", false);
  if (opt) {
    if (options.load_optimizer && !options.finetune) {
      STRATA_CHECK(saved_optim, "checkpoint: ", dir.string(),
                   " has no optimizer state (set checkpoint.no_load_optim to load weights only)");
      const std::string optim_file = "optimizer" + io.extension();
      const TensorFileContents optim = read_file(optim_file);
      for (ParamState& s : opt->checkpoint_states()) {  // full-size (distributed: prepared, then scattered)
        load_into(s.exp_avg, optim.tensors, "optimizer.exp_avg." + s.param->name, optim_file);
        load_into(s.exp_avg_sq, optim.tensors, "optimizer.exp_avg_sq." + s.param->name, optim_file);
        const std::string master = "optimizer.master." + s.param->name;
        if (s.separate_master && optim.tensors.count(master))
          load_into(s.master, optim.tensors, master, optim_file);
        else if (s.separate_master)
          s.master.copy_(s.param->value.flatten());
        else if (optim.tensors.count(master))  // saved under bf16, loaded under fp32: take the f32 master
          load_into(s.master, optim.tensors, master, optim_file);
      }
      opt->set_step_count(st.optimizer_step_count);
    } else {
      opt->reset_masters_from_values();
      for (ParamState& s : opt->states()) {
        s.exp_avg.zero_();
        s.exp_avg_sq.zero_();
      }
      opt->set_step_count(0);
      st.optimizer_step_count = 0;
    }
  }
  if (options.finetune) {
    st.iteration = 0;
    st.consumed_train_samples = 0;
    st.num_skipped_iterations = 0;
    st.num_evaluations = 0;
    st.optimizer_step_count = 0;
  }
  return st;
}

}  // namespace strata
