// check_checkpoint_paths (training/checkpointing/checkpoint_paths.h).
// Reference: megatron/training/checkpointing.py (load_checkpoint, save_checkpoint).
#include "training/checkpointing/checkpoint_paths.h"

#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_architecture.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/checkpointing/checkpoint_directory.h"
#include "training/checkpointing/megatron/megatron_checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <yaml-cpp/yaml.h>

namespace strata::training {

namespace fs = std::filesystem;
using config::ConfigError;

namespace {

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// The nearest ancestor of `p` (itself included) that exists; empty when none does.
fs::path nearest_existing(fs::path p) {
  std::error_code ec;
  p = fs::absolute(p, ec);
  while (!p.empty()) {
    if (fs::exists(p, ec)) return p;
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  return {};
}

void check_save(const fs::path& save, bool create) {
  std::error_code ec;
  if (fs::exists(save, ec) && !fs::is_directory(save, ec))
    throw ConfigError("checkpoint.save", quoted(save) + " exists and is not a directory");
  if (!create) {
    const fs::path base = nearest_existing(save);
    if (base.empty() || !fs::is_directory(base, ec))
      throw ConfigError("checkpoint.save",
                        quoted(save) + " cannot be created: " + quoted(base) + " is not a directory");
    if (::access(base.c_str(), W_OK | X_OK) != 0)
      throw ConfigError("checkpoint.save", quoted(save) + " cannot be created: " + quoted(base) + " is not writable");
    return;
  }
  fs::create_directories(save, ec);
  if (ec) throw ConfigError("checkpoint.save", "cannot create " + quoted(save) + ": " + ec.message());
  // A probe file per process (ranks share the directory).
  const fs::path probe = save / (".strata_write_test_" + std::to_string(::getpid()));
  bool ok = false;
  {
    std::ofstream out(probe, std::ios::binary | std::ios::trunc);
    ok = out.good() && (out << "ok").good();
  }
  fs::remove(probe, ec);
  if (!ok) throw ConfigError("checkpoint.save", quoted(save) + " is not writable");
}

void check_load(const fs::path& load, const std::optional<std::string>& save) {
  std::error_code ec;
  if (fs::exists(load, ec)) {
    if (!fs::is_directory(load, ec))
      throw ConfigError("checkpoint.load", quoted(load) + " is not a directory (give the checkpoint directory, "
                                           "the one holding latest_checkpointed_iteration.txt)");
    return;
  }
  const bool is_save = save && fs::weakly_canonical(fs::path(*save), ec) == fs::weakly_canonical(load, ec);
  if (!is_save)
    throw ConfigError("checkpoint.load", quoted(load) + " does not exist (to start from scratch leave "
                                         "checkpoint.load null, or point it at an existing directory)");
}

}  // namespace

ResolvedConfig with_pretrained_checkpoint(const ResolvedConfig& cfg) {
  const auto& pretrained = cfg.checkpoint->pretrained_checkpoint;
  if (!pretrained) return cfg;
  const auto& load = cfg.checkpoint->load;
  if (load && read_checkpoint_tracker(*load)) return cfg;  // the run's own checkpoint: resume from it
  if (!read_checkpoint_tracker(*pretrained))
    throw ConfigError("checkpoint.pretrained_checkpoint",
                      quoted(fs::path(*pretrained)) + " holds no checkpoint (no " + kTrackerFile + "), and checkpoint.load " +
                          (load ? quoted(fs::path(*load)) + " holds none either" : std::string("is null")));
  StrataConfig c = cfg.fields();
  c.checkpoint.load = *pretrained;
  c.checkpoint.finetune = true;
  return c.validate(cfg.parallel->world_size);
}

StrataConfig with_checkpoint_args(const StrataConfig& cfg, std::vector<std::string>* log) {
  if (!cfg.checkpoint.use_checkpoint_args) return cfg;
  std::optional<std::string> dir;
  std::optional<int64_t> iteration;
  for (const auto& d : {cfg.checkpoint.load, cfg.checkpoint.pretrained_checkpoint})
    if (d && !iteration && (iteration = read_checkpoint_tracker(*d))) dir = d;
  if (!iteration) return cfg;
  const std::string saved_text = read_checkpoint_config(*dir, *iteration);
  if (saved_text.empty())
    throw ConfigError("checkpoint.use_checkpoint_args",
                      quoted(fs::path(*dir)) + " (iteration " + std::to_string(*iteration) +
                          "): its manifest.json has no \"config\" to take the arguments from");
  YAML::Node saved, ours;
  try {
    saved = YAML::Load(saved_text)["model"];
    ours = YAML::Load(cfg.to_yaml())["model"];
  } catch (const YAML::Exception& e) {
    throw ConfigError("checkpoint.use_checkpoint_args", quoted(fs::path(*dir)) + ": the saved config is not valid "
                                                        "YAML: " + e.what());
  }
  StrataConfig out = cfg;
  for (const std::string& f : architecture_field_names()) {
    const YAML::Node v = saved[f];
    if (!v.IsDefined()) continue;  // saved before the field existed: this run's value stands
    YAML::Emitter text, mine;
    text.SetSeqFormat(YAML::Flow);
    mine.SetSeqFormat(YAML::Flow);
    text << v;
    mine << ours[f];
    if (std::string(text.c_str()) == mine.c_str()) continue;
    StrataConfig::table().apply_override("model." + f + "=" + text.c_str(), out);
    if (log) log->push_back("model." + f + "=" + text.c_str() + " (was " + mine.c_str() + ")");
  }
  return out;
}

void check_checkpoint_paths(const ResolvedConfig& given, bool create_save) {
  const ResolvedConfig cfg = with_pretrained_checkpoint(given);
  if (cfg.checkpoint->save) check_save(*cfg.checkpoint->save, create_save);
  check_save_directory(cfg);  // another run's checkpoints are not replaced silently
  if (cfg.checkpoint->load) {
    check_load(*cfg.checkpoint->load, cfg.checkpoint->save);
    check_load_directory(*cfg.checkpoint->load);  // checkpoints without a tracker are not a fresh start
    // Megatron's --exit-on-missing-checkpoint: no checkpoint to load is an error, not a fresh start.
    if (cfg.checkpoint->exit_on_missing_checkpoint && !read_checkpoint_tracker(*cfg.checkpoint->load))
      throw ConfigError("checkpoint.exit_on_missing_checkpoint",
                        "checkpoint.load '" + *cfg.checkpoint->load + "' holds no checkpoint (no " + kTrackerFile +
                            "): exiting instead of training from scratch");
  }
  // A resume into another model: refused here, before the model is allocated (the Trainer checks
  // again and logs a finetune's differences).
  if (cfg.checkpoint->load)
    if (const auto it = read_checkpoint_tracker(*cfg.checkpoint->load)) {
      // Megatron: --ckpt-format torch loads a distributed checkpoint only with --auto-detect-ckpt-format.
      const CheckpointFormat found =
          detect_checkpoint_format((fs::path(*cfg.checkpoint->load) / checkpoint_dir_name(*it)).string());
      if (cfg.checkpoint->ckpt_format == CkptFormat::Torch && !cfg.checkpoint->auto_detect_ckpt_format &&
          found != CheckpointFormat::MegatronTorch)
        throw ConfigError("checkpoint.ckpt_format", "is torch, but '" + *cfg.checkpoint->load + "' (iteration " +
                                                        std::to_string(*it) + ") holds a " + checkpoint_format_name(found) +
                                                        " checkpoint: set checkpoint.auto_detect_ckpt_format "
                                                        "(--auto-detect-ckpt-format) to load it");
      check_checkpoint_architecture(*cfg.checkpoint->load, *it, cfg);
      // A resume whose schedule differs from the checkpoint's without saying which to use: refused
      // here too (an old checkpoint without a schedule is the Trainer's warning).
      if (resume_loads_lr_schedule(cfg))
        if (const auto saved = read_checkpoint_lr_schedule(*cfg.checkpoint->load, *it);
            saved || cfg.checkpoint->use_checkpoint_opt_param_scheduler)
          resolve_resume_lr_schedule(saved, cfg, "'" + *cfg.checkpoint->load + "' (iteration " + std::to_string(*it) + ")");
    }
}

}  // namespace strata::training
