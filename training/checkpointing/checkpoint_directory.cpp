// Checkpoint directory listing, the save-directory rule and housekeeping (see checkpoint_directory.h).
#include "training/checkpointing/checkpoint_directory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "training/checkpointing/checkpoint.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

bool has_strata_manifest(const fs::path& iteration_dir) {
  std::ifstream in(iteration_dir / "manifest.json");
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str().find(std::string("\"") + kCheckpointFormat + "\"") != std::string::npos;
}

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::weakly_canonical(fs::path(a), ec) == fs::weakly_canonical(fs::path(b), ec);
}

std::string iteration_list(const std::vector<int64_t>& its) {
  std::string s;
  for (size_t i = 0; i < its.size(); ++i) s += (i ? ", " : "") + std::to_string(its[i]);
  return s;
}

}  // namespace

CheckpointDirectoryListing list_checkpoint_directory(const std::string& dir) {
  CheckpointDirectoryListing out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex iteration_re(R"(iter_([0-9]{7}))"), interrupted_re(R"(iter_[0-9]{7}\.tmp)");
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (e.is_directory(ec) && std::regex_match(name, m, iteration_re)) {
      if (has_strata_manifest(e.path()))
        out.iterations.push_back(std::stoll(m[1].str()));
      else
        out.foreign.push_back(e.path().string());
    } else if ((e.is_directory(ec) && std::regex_match(name, interrupted_re)) ||
               name == std::string(kTrackerFile) + ".tmp") {
      out.interrupted.push_back(e.path().string());
    }
  }
  std::sort(out.iterations.begin(), out.iterations.end());
  std::sort(out.foreign.begin(), out.foreign.end());
  std::sort(out.interrupted.begin(), out.interrupted.end());
  try {
    out.tracker = read_checkpoint_tracker(dir);
  } catch (const std::exception&) {
    out.tracker = -1;  // unreadable: the directory is used all the same
  }
  return out;
}

bool resumes_from_save_directory(const ResolvedConfig& cfg) {
  const CheckpointConfig& c = cfg.checkpoint;
  return c.save && c.load && !c.finetune && same_directory(*c.load, *c.save);
}

void check_load_directory(const std::string& dir) {
  const CheckpointDirectoryListing l = list_checkpoint_directory(dir);
  const std::string tracker = (fs::path(dir) / kTrackerFile).string();
  if (l.tracker && *l.tracker < 0)
    throw config::ConfigError("checkpoint.load", "'" + tracker + "' is not an iteration number (a corrupt tracker "
                                                 "file): write the iteration to resume from into it");
  if (l.tracker || (l.iterations.empty() && l.foreign.empty())) return;
  const std::string found = l.iterations.empty() ? "iter_* directories not written by Strata"
                                                 : "iterations " + iteration_list(l.iterations);
  std::string fix = "restore it";
  if (!l.iterations.empty())
    fix += " (write " + std::to_string(l.iterations.back()) + " into it to resume from the latest)";
  throw config::ConfigError("checkpoint.load", "'" + dir + "' holds checkpoints (" + found + ") but no " +
                                                   kTrackerFile + ", so it is not known which to resume: " + fix +
                                                   ", or start a new run in another directory");
}

// Resuming from checkpoint.save: the iterations after the tracker's (a rolled-back tracker, or a
// save interrupted before the tracker moved) are replaced as training reaches them. A run that does
// not load the whole state would replace them with less than they hold: refused.
void check_iterations_after_resume(const ResolvedConfig& cfg, const CheckpointDirectoryListing& l) {
  const CheckpointConfig& c = cfg.checkpoint;
  if (!l.tracker || !(c.no_load_optim || c.no_load_rng)) return;
  std::vector<int64_t> later;
  for (int64_t it : l.iterations)
    if (it > *l.tracker) later.push_back(it);
  if (later.empty()) return;
  throw config::ConfigError(c.no_load_optim ? "checkpoint.no_load_optim" : "checkpoint.no_load_rng",
                            "'" + *c.save + "' holds iterations " + iteration_list(later) + " after the one resumed (" +
                                std::to_string(*l.tracker) + "); this run would replace them with checkpoints "
                                "whose " + (c.no_load_optim ? "optimizer" : "RNG") + " state was not loaded. Save to "
                                "another directory, or remove those iterations first");
}

void check_save_directory(const ResolvedConfig& cfg) {
  const CheckpointConfig& c = cfg.checkpoint;
  if (!c.save) return;
  const CheckpointDirectoryListing l = list_checkpoint_directory(*c.save);
  if (!l.holds_checkpoints()) return;
  if (resumes_from_save_directory(cfg)) {  // its tracker: check_load_directory, as checkpoint.load
    check_iterations_after_resume(cfg, l);
    return;
  }
  if (!c.overwrite) {
    std::string found = l.iterations.empty() ? "" : "iterations " + iteration_list(l.iterations);
    if (l.tracker && *l.tracker >= 0)
      found += (found.empty() ? "" : "; ") + std::string("latest_checkpointed_iteration.txt says ") +
               std::to_string(*l.tracker);
    if (!l.foreign.empty()) found += (found.empty() ? "" : "; ") + std::string("other iter_* directories");
    throw config::ConfigError(
        "checkpoint.save", "'" + *c.save + "' holds another run's checkpoints (" + found +
                               "). To resume that run set checkpoint.load to the same directory; to start a new "
                               "run choose another directory, or replace them with --overwrite "
                               "(checkpoint.overwrite=true)");
  }
  if (!l.foreign.empty())
    throw config::ConfigError("checkpoint.save", "'" + l.foreign.front() +
                                                     "' was not written by Strata (no strata-checkpoint manifest): "
                                                     "checkpoint.overwrite replaces only Strata's checkpoints; move it "
                                                     "or choose another directory");
}

std::vector<std::string> clean_checkpoint_directory(const std::string& dir, bool remove_previous_run) {
  const CheckpointDirectoryListing l = list_checkpoint_directory(dir);
  std::vector<std::string> removed = l.interrupted;
  if (remove_previous_run) {
    for (int64_t it : l.iterations) removed.push_back((fs::path(dir) / checkpoint_dir_name(it)).string());
    if (l.tracker) removed.push_back((fs::path(dir) / kTrackerFile).string());
  }
  for (const std::string& p : removed) fs::remove_all(p);
  return removed;
}

std::string retire_previous_checkpoint(const std::string& dir, std::optional<int64_t> previous, int64_t iteration,
                                       int64_t retain_interval) {
  if (!previous || *previous <= 0 || *previous == iteration || *previous % retain_interval == 0) return "";
  const fs::path old = fs::path(dir) / checkpoint_dir_name(*previous);
  std::error_code ec;
  if (fs::is_symlink(old, ec) || !fs::is_directory(old, ec)) return "";
  fs::remove_all(old);
  return old.string();
}

}  // namespace strata
