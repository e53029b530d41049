// The checkpoint's learning-rate schedule and the resume rule (see checkpoint_scheduler.h).
// Reference: megatron/core/optimizer_param_scheduler.py (state_dict, _check_and_set, load_state_dict).
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/checkpointing/megatron/megatron_checkpoint.h"
#include "training/checkpointing/megatron/megatron_legacy_read.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/logging.h"
#include "training/checkpointing/checkpoint.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

template <typename E, size_t N>
E enum_member(const json& j, const char* key, const config::EnumName<E> (&names)[N], const fs::path& manifest) {
  STRATA_CHECK(j.contains(key) && j.at(key).is_string(), "checkpoint: ", manifest.string(),
               ": \"optimizer.scheduler.", key, "\" is missing or not a string");
  const std::string v = j.at(key).get<std::string>();
  for (const auto& n : names)
    if (v == n.name) return n.value;
  STRATA_THROW("checkpoint: ", manifest.string(), ": \"optimizer.scheduler.", key, "\" is '", v,
               "', not a known style");
}

double number_member(const json& j, const char* key, const fs::path& manifest) {
  STRATA_CHECK(j.contains(key) && j.at(key).is_number(), "checkpoint: ", manifest.string(),
               ": \"optimizer.scheduler.", key, "\" is missing or not a number");
  return j.at(key).get<double>();
}

int64_t integer_member(const json& j, const char* key, const fs::path& manifest) {
  STRATA_CHECK(j.contains(key) && j.at(key).is_number_integer(), "checkpoint: ", manifest.string(),
               ": \"optimizer.scheduler.", key, "\" is missing or not an integer");
  return j.at(key).get<int64_t>();
}

std::optional<double> optional_number(const json& j, const char* key, const fs::path& manifest) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return number_member(j, key, manifest);
}

std::string shown(double v) { return json(v).dump(); }  // the shortest text that reads back as v
std::string shown(const std::optional<double>& v) { return v ? shown(*v) : "null"; }

}  // namespace

json lr_schedule_json(const LrScheduleState& s) {
  json j = {{"max_lr", s.max_lr},
            {"min_lr", s.min_lr},
            {"lr_warmup_steps", s.warmup_steps},
            {"lr_decay_steps", s.decay_steps},
            {"lr_decay_style", config::enum_to_string<LrDecayStyle>(kLrDecayStyleNames, s.decay_style)},
            {"start_wd", s.start_wd},
            {"end_wd", s.end_wd},
            {"wd_incr_steps", s.wd_incr_steps},
            {"wd_incr_style", config::enum_to_string<WeightDecayIncrStyle>(kWeightDecayIncrStyleNames, s.wd_incr_style)}};
  if (s.decoupled_max_lr) j["decoupled_max_lr"] = *s.decoupled_max_lr;
  if (s.decoupled_min_lr) j["decoupled_min_lr"] = *s.decoupled_min_lr;
  return j;
}

LrScheduleState lr_schedule_from_json(const json& j, const fs::path& manifest) {
  STRATA_CHECK(j.is_object(), "checkpoint: ", manifest.string(), ": \"optimizer.scheduler\" is not an object");
  LrScheduleState s;
  s.max_lr = number_member(j, "max_lr", manifest);
  s.min_lr = number_member(j, "min_lr", manifest);
  s.warmup_steps = number_member(j, "lr_warmup_steps", manifest);
  s.decay_steps = integer_member(j, "lr_decay_steps", manifest);
  s.decay_style = enum_member(j, "lr_decay_style", kLrDecayStyleNames, manifest);
  s.start_wd = number_member(j, "start_wd", manifest);
  s.end_wd = number_member(j, "end_wd", manifest);
  s.wd_incr_steps = integer_member(j, "wd_incr_steps", manifest);
  s.wd_incr_style = enum_member(j, "wd_incr_style", kWeightDecayIncrStyleNames, manifest);
  s.decoupled_max_lr = optional_number(j, "decoupled_max_lr", manifest);
  s.decoupled_min_lr = optional_number(j, "decoupled_min_lr", manifest);
  return s;
}

std::optional<LrScheduleState> read_checkpoint_lr_schedule(const std::string& load_dir, int64_t iteration) {
  const std::string dir = (fs::path(load_dir) / checkpoint_dir_name(iteration)).string();
  if (detect_checkpoint_format(dir) == CheckpointFormat::MegatronTorchDist)
    return megatron_lr_schedule(*read_megatron_common_state(dir), dir);
  if (detect_checkpoint_format(dir) == CheckpointFormat::MegatronTorch)
    return megatron_lr_schedule(*read_megatron_legacy_common(dir), dir);
  const fs::path manifest = fs::path(load_dir) / checkpoint_dir_name(iteration) / "manifest.json";
  std::ifstream in(manifest);
  STRATA_CHECK(in.good(), "checkpoint: cannot read ", manifest.string());
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    STRATA_THROW("checkpoint: ", manifest.string(), " is not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("optimizer") || !j.at("optimizer").is_object() ||
      !j.at("optimizer").contains("scheduler"))
    return std::nullopt;
  return lr_schedule_from_json(j.at("optimizer").at("scheduler"), manifest);
}

LrScheduleState config_lr_schedule_state(const ResolvedConfig& cfg) {
  const LrSchedule schedule(cfg.optimizer, cfg.training);
  LrScheduleState s = schedule.state();
  if (cfg.optimizer->decoupled_lr) {
    s.decoupled_max_lr = *cfg.optimizer->decoupled_lr;
    s.decoupled_min_lr = cfg.optimizer->decoupled_min_lr.value_or(cfg.optimizer->min_lr);
  }
  return s;
}

std::vector<std::string> lr_schedule_differences(const LrScheduleState& saved, const LrScheduleState& ours,
                                                 const ResolvedConfig& cfg) {
  const OptimizerConfig& o = cfg.optimizer;
  const bool samples = cfg.training->train_samples.has_value();
  const std::string warmup = o.lr_warmup_fraction ? "optimizer.lr_warmup_fraction (warmup samples)"
                             : samples             ? "optimizer.lr_warmup_samples"
                                                   : "optimizer.lr_warmup_iters (× global_batch_size: warmup samples)";
  const std::string decay =
      samples ? "optimizer.lr_decay_samples" : "optimizer.lr_decay_iters (× global_batch_size: decay samples)";
  const std::string incr = samples ? "training.train_samples (weight-decay increment samples)"
                                   : "training.train_iters (× global_batch_size: weight-decay increment samples)";
  const std::string start = o.start_weight_decay ? "optimizer.start_weight_decay" : "optimizer.weight_decay";
  const std::string end = o.end_weight_decay ? "optimizer.end_weight_decay" : "optimizer.weight_decay";
  std::vector<std::string> out;
  auto cmp = [&](const std::string& field, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(field + ": the checkpoint has " + a + ", this run " + b);
  };
  auto style = [](LrDecayStyle s) { return std::string(config::enum_to_string<LrDecayStyle>(kLrDecayStyleNames, s)); };
  auto wd_style = [](WeightDecayIncrStyle s) {
    return std::string(config::enum_to_string<WeightDecayIncrStyle>(kWeightDecayIncrStyleNames, s));
  };
  cmp("optimizer.lr", shown(saved.max_lr), shown(ours.max_lr));
  cmp("optimizer.min_lr", shown(saved.min_lr), shown(ours.min_lr));
  cmp(warmup, shown(saved.warmup_steps), shown(ours.warmup_steps));
  cmp(decay, std::to_string(saved.decay_steps), std::to_string(ours.decay_steps));
  cmp("optimizer.lr_decay_style", style(saved.decay_style), style(ours.decay_style));
  cmp(start + " (start)", shown(saved.start_wd), shown(ours.start_wd));
  cmp(end + " (end)", shown(saved.end_wd), shown(ours.end_wd));
  cmp(incr, std::to_string(saved.wd_incr_steps), std::to_string(ours.wd_incr_steps));
  cmp("optimizer.weight_decay_incr_style", wd_style(saved.wd_incr_style), wd_style(ours.wd_incr_style));
  cmp("optimizer.decoupled_lr", shown(saved.decoupled_max_lr), shown(ours.decoupled_max_lr));
  cmp("optimizer.decoupled_min_lr", shown(saved.decoupled_min_lr), shown(ours.decoupled_min_lr));
  return out;
}

bool resume_loads_lr_schedule(const ResolvedConfig& cfg) {
  return !cfg.checkpoint->finetune && !cfg.checkpoint->no_load_optim;
}

LrScheduleState resolve_resume_lr_schedule(const std::optional<LrScheduleState>& saved, const ResolvedConfig& cfg,
                                           const std::string& where) {
  const LrScheduleState ours = config_lr_schedule_state(cfg);
  if (!resume_loads_lr_schedule(cfg) || cfg.checkpoint->override_opt_param_scheduler) return ours;
  if (!saved) {
    if (cfg.checkpoint->use_checkpoint_opt_param_scheduler)
      throw config::ConfigError("checkpoint.use_checkpoint_opt_param_scheduler",
                                where + " holds no learning-rate schedule (written before Strata saved it); "
                                        "resume with the config's (checkpoint.override_opt_param_scheduler)");
    log::warn("checkpoint {} holds no learning-rate schedule to compare (written before Strata saved it): "
              "continuing with the config's",
              where);
    return ours;
  }
  if (cfg.checkpoint->use_checkpoint_opt_param_scheduler) return *saved;
  const std::vector<std::string> diffs = lr_schedule_differences(*saved, ours, cfg);
  if (diffs.empty()) return ours;
  std::string list;
  for (const std::string& d : diffs) list += "\n  " + d;
  const std::string field = diffs.front().substr(0, diffs.front().find_first_of(" :"));
  throw config::ConfigError(
      field, "the learning-rate schedule differs from the one saved in " + where + ":" + list +
                 "\nSet checkpoint.use_checkpoint_opt_param_scheduler=true (--use-checkpoint-opt_param-scheduler) to "
                 "continue the checkpoint's schedule, or checkpoint.override_opt_param_scheduler=true "
                 "(--override-opt_param-scheduler) to use this run's");
}

}  // namespace strata
