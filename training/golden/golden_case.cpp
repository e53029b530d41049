// Golden-value test cases: model_config.yaml, runs and verdicts (see golden_case.h).
// Reference: Megatron-LM tests/functional_tests/shell_test_utils/run_ci_test.sh,
// python_test_utils/test_pretraining_{regular,resume_checkpoint}_pipeline.py.
#include "training/golden/golden_case.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "core/tensor.h"
#include "training/checkpointing/checkpoint.h"
#include "training/config/model_factory.h"
#include "training/run.h"

namespace strata::golden {

namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  STRATA_CHECK_KIND(ErrorKind::Io, f.good(), "golden case: cannot open ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool is_metadata_key(const std::string& key) {
  for (char c : key)
    if (c >= 'a' && c <= 'z') return false;
  return true;
}

std::string scalar_text(const YAML::Node& n, const std::string& where) {
  STRATA_CHECK_KIND(ErrorKind::Config, n.IsScalar(), where, ": expected a scalar");
  return n.Scalar();
}

std::string config_path(const GoldenCase& c) { return (fs::path(c.dir) / "model_config.yaml").string(); }

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    STRATA_CHECK_KIND(ErrorKind::Config, false, source, ": not valid YAML: ", e.what());
  }
  return {};
}

// The Strata sections (lower-case keys) of a case's text, decoded but not validated.
StrataConfig decode_sections(const std::string& text, const std::string& path) {
  const YAML::Node root = parse_yaml(text, path);
  YAML::Node sections(YAML::NodeType::Map);
  for (const auto& kv : root)
    if (!is_metadata_key(kv.first.as<std::string>())) sections[kv.first.as<std::string>()] = kv.second;
  StrataConfig cfg;
  StrataConfig::table().untyped().decode_yaml(sections, &cfg, path);
  return cfg;
}

}  // namespace

GoldenCase load_golden_case(const std::string& dir) {
  GoldenCase c;
  c.dir = dir;
  c.name = fs::path(dir).lexically_normal().filename().string();
  if (c.name.empty()) c.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  const std::string path = config_path(c);
  c.config_text = read_text(path);
  const YAML::Node root = parse_yaml(c.config_text, path);
  STRATA_CHECK_KIND(ErrorKind::Config, root.IsMap(), path, ": expected a map of sections and test metadata");
  c.metrics = default_checked_metrics();
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (!is_metadata_key(key)) continue;
    const std::string where = path + ": " + key;
    if (key == "TEST_TYPE") {
      c.test_type = scalar_text(kv.second, where);
      STRATA_CHECK_KIND(ErrorKind::Config, c.test_type == "regular" || c.test_type == "ckpt-resume", where,
                        ": '", c.test_type, "' is not supported (regular, ckpt-resume)");
    } else if (key == "MODE") {
      c.mode = scalar_text(kv.second, where);
      STRATA_CHECK_KIND(ErrorKind::Config, c.mode == "pretraining", where, ": '", c.mode,
                        "' is not supported (pretraining)");
    } else if (key == "METRICS") {
      STRATA_CHECK_KIND(ErrorKind::Config, kv.second.IsSequence(), where, ": expected a list of metric names");
      c.metrics.clear();
      for (const auto& m : kv.second) c.metrics.push_back(scalar_text(m, where));
    } else if (key == "ENV_VARS") {
      STRATA_CHECK_KIND(ErrorKind::Config, kv.second.IsMap(), where, ": expected a map");
      for (const auto& e : kv.second) c.env_vars[e.first.as<std::string>()] = scalar_text(e.second, where);
    } else if (key == "MODEL_ARGS") {
      STRATA_CHECK_KIND(ErrorKind::Config, false, where,
                        ": Megatron command-line flags are not read; write the Strata config sections instead");
    }
    // LAUNCHER, N_REPEAT, BEFORE_SCRIPT, … are Megatron CI metadata with no Strata meaning.
  }
  auto flag = [&](const char* k) {
    auto it = c.env_vars.find(k);
    return it != c.env_vars.end() && it->second == "1";
  };
  c.allow_nondeterministic = flag("NVTE_ALLOW_NONDETERMINISTIC_ALGO") || flag("NON_DETERMINSTIC_RESULTS");
  return c;
}

std::string golden_file_path(const GoldenCase& c, const std::string& platform) {
  return (fs::path(c.dir) / ("golden_values_" + platform + ".json")).string();
}

namespace {

// golden_values_<platform>_<tag>.json files of the case, sorted by name.
std::vector<std::string> variant_files(const GoldenCase& c, const std::string& platform) {
  const std::string prefix = "golden_values_" + platform + "_";
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(c.dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind(prefix, 0) == 0 && name.size() > prefix.size() + 5 &&
        name.substr(name.size() - 5) == ".json")
      out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The cpu file (reference first, then the variants) written with `here`'s numerics, if any.
std::optional<GoldenChoice> same_numerics_file(const GoldenCase& c, const kernels::cpu::CpuPlatform& here) {
  std::vector<std::string> files = {golden_file_path(c, "cpu")};
  for (const std::string& f : variant_files(c, "cpu")) files.push_back(f);
  for (const std::string& f : files) {
    if (!fs::exists(f)) continue;
    GoldenFile g = read_golden_file(f);
    if (g.platform && g.platform->same_numerics(here))
      return GoldenChoice{f, std::move(g), true,
                          "exact: the golden file was written with this platform's numerics (" + here.describe() + ")"};
  }
  return std::nullopt;
}

}  // namespace

GoldenChoice choose_golden_file(const GoldenCase& c, const std::string& platform,
                                const kernels::cpu::CpuPlatform& here) {
  if (platform == "cpu")
    if (std::optional<GoldenChoice> same = same_numerics_file(c, here)) return *same;
  GoldenChoice choice;
  choice.path = golden_file_path(c, platform);
  choice.file = read_golden_file(choice.path);
  if (platform != "cpu") {
    choice.reason = "exact: platform " + platform;
    return choice;
  }
  choice.exact = false;
  choice.reason = choice.file.platform
                      ? "cross-platform: no golden file of this case has this platform's numerics (" +
                            choice.file.platform->difference(here) + "; this run: " + here.describe() + ")"
                      : "cross-platform: the golden file records no platform (this run: " + here.describe() + ")";
  return choice;
}

std::string regenerate_path(const GoldenCase& c, const std::string& platform, const kernels::cpu::CpuPlatform& here) {
  const std::string reference = golden_file_path(c, platform);
  if (platform != "cpu") return reference;
  if (std::optional<GoldenChoice> same = same_numerics_file(c, here)) return same->path;
  if (!fs::exists(reference) || !read_golden_file(reference).platform) return reference;
  return (fs::path(c.dir) / ("golden_values_cpu_" + here.tag() + ".json")).string();
}

void remove_platform_variants(const GoldenCase& c, const std::string& platform) {
  for (const std::string& f : variant_files(c, platform)) fs::remove(f);
}

ResolvedConfig case_config(const GoldenCase& c, const std::map<std::string, std::string>& placeholders,
                         const std::string& platform, int64_t world_size) {
  const std::string path = config_path(c);
  std::string text = c.config_text;
  for (size_t p = text.find("${"); p != std::string::npos; p = text.find("${", p)) {
    const size_t e = text.find('}', p);
    STRATA_CHECK_KIND(ErrorKind::Config, e != std::string::npos, path, ": unterminated ${ placeholder");
    const std::string name = text.substr(p + 2, e - p - 2);
    auto it = placeholders.find(name);
    STRATA_CHECK_KIND(ErrorKind::Config, it != placeholders.end(), path, ": placeholder ${", name,
                      "} is not available in this run (TENSORBOARD_PATH, CHECKPOINT_SAVE_PATH, CHECKPOINT_LOAD_PATH, "
                      "DATA_PATH)");
    text.replace(p, e - p + 1, it->second);
    p += it->second.size();
  }
  StrataConfig cfg = decode_sections(text, path);
  cfg.training.device = platform == "cpu" ? "cpu" : "cuda";
  return cfg.validate(world_size);
}

ParallelConfig case_parallel_config(const GoldenCase& c) {
  // Placeholders stay unsubstituted: they are plain strings to the decoder, and only `parallel` is read.
  return decode_sections(c.config_text, config_path(c)).parallel;
}

int64_t case_world_size(const GoldenCase& c) {
  const ParallelConfig p = case_parallel_config(c);
  return p.world_size.value_or(p.model_parallel_size());
}

void GoldenJob::barrier() const {
  if (world && world->size() > 1) world->barrier();
}

bool GoldenJob::agree(bool passed) const {
  if (!world || world->size() == 1) return passed;
  Tensor t = Tensor::full({1}, passed ? 1.0 : 0.0, DType::I32);
  world->broadcast(t, world->size() - 1);
  return t.item() != 0.0;
}

std::vector<std::string> record_only_metrics(const std::string& platform) {
  if (platform == "cpu") return {"iteration-time", "mem-allocated-bytes", "mem-max-allocated-bytes"};
  return {};
}

namespace {

// Every rank of the job trains; the metrics rank prints the argument table (as `strata train`'s
// logging rank does).
int train_in_process(const ResolvedConfig& cfg, const GoldenJob& job) {
  if (job.is_metrics_rank()) {
    std::printf("%s", cfg.argument_table().c_str());
    std::fflush(stdout);
  }
  return training::run(cfg);
}

void write_config_file(const std::string& path, const ResolvedConfig& cfg) {
  std::ofstream f(path, std::ios::binary);
  f << cfg.to_yaml();
  STRATA_CHECK_KIND(ErrorKind::Io, f.good(), "golden: cannot write ", path);
}

}  // namespace

CaseRun run_golden_case(const GoldenCase& c, const RunOptions& options) {
  STRATA_CHECK(!options.work_dir.empty(), "golden: the work directory is not set");
  const fs::path work = fs::absolute(options.work_dir);
  const GoldenJob& job = options.job;
  // Before anything is written: the launched ranks must be the layout's (the same check on every rank).
  const int64_t needed = case_world_size(c);
  STRATA_CHECK_KIND(ErrorKind::Config, needed == job.size(), config_path(c), ": the parallel section needs ",
                    needed, " ranks but ", job.size(),
                    " were launched; run it as `scripts/mpirun.sh -np ", needed, " strata golden … ", c.dir,
                    "` (parallel.world_size, or tensor × context × pipeline model parallel sizes)");
  CaseRun run;
  run.has_metrics = job.is_metrics_rank();
  run.tensorboard_dir = (work / "tensorboard").string();
  run.resume_tensorboard_dir = (work / "tensorboard_resume").string();
  const std::string ckpt = (work / "checkpoints").string();
  if (job.rank() == 0) {  // one rank prepares the shared work directory
    for (const std::string& d : {run.tensorboard_dir, run.resume_tensorboard_dir, ckpt}) fs::remove_all(d);
    fs::create_directories(work);
  }
  job.barrier();
  for (const auto& [k, v] : c.env_vars) ::setenv(k.c_str(), v.c_str(), /*overwrite=*/0);

  // DATA_PATH: tests/functional/data, the cases' data files (Megatron's ${DATA_PATH} of its test data).
  fs::path case_dir = fs::weakly_canonical(c.dir);
  if (!case_dir.has_filename()) case_dir = case_dir.parent_path();  // "…/case/"
  const std::string data = (case_dir.parent_path().parent_path() / "data").string();
  std::map<std::string, std::string> ph = {{"TENSORBOARD_PATH", run.tensorboard_dir},
                                           {"CHECKPOINT_SAVE_PATH", ckpt},
                                           {"CHECKPOINT_LOAD_PATH", ckpt},
                                           {"DATA_PATH", data}};
  const ResolvedConfig cfg = case_config(c, ph, options.platform, job.size());
  run.train_iters = *cfg.training->train_iters;
  run.precision = config::enum_to_string(std::span<const config::EnumName<Precision>>(kPrecisionNames), cfg.training->precision);
  // Extracted: Megatron's metrics, the case's METRICS and every named loss of the model.
  run.loss_names = model_loss_names(cfg);
  std::vector<std::string> extracted = extracted_metric_names();
  for (const std::vector<std::string>* more : std::initializer_list<const std::vector<std::string>*>{&c.metrics, &run.loss_names})
    for (const std::string& m : *more)
      if (std::find(extracted.begin(), extracted.end(), m) == extracted.end()) extracted.push_back(m);
  STRATA_CHECK_KIND(ErrorKind::Config, cfg.logging->tensorboard_dir.has_value(), config_path(c),
                    ": logging.tensorboard_dir must be ${TENSORBOARD_PATH} (the runner reads the event files)");
  STRATA_CHECK_KIND(ErrorKind::Config, cfg.logging->log_interval == 1, config_path(c),
                    ": logging.log_interval must be 1 (one value per step, as Megatron's --log-interval 1)");
  if (c.test_type == "ckpt-resume") {
    STRATA_CHECK_KIND(ErrorKind::Config, cfg.checkpoint->save == ckpt && cfg.checkpoint->load == ckpt &&
                                             cfg.checkpoint->save_interval.has_value(),
                      config_path(c),
                      ": ckpt-resume needs checkpoint.save: ${CHECKPOINT_SAVE_PATH}, checkpoint.load: "
                      "${CHECKPOINT_LOAD_PATH} and checkpoint.save_interval");
    run.resume_iteration = *cfg.training->train_iters / 2;
    STRATA_CHECK_KIND(ErrorKind::Config, run.resume_iteration > 0 && run.resume_iteration % *cfg.checkpoint->save_interval == 0,
                      config_path(c), ": checkpoint.save_interval (", *cfg.checkpoint->save_interval,
                      ") must divide training.train_iters/2 (", run.resume_iteration, ")");
  }

  int rc = train_in_process(cfg, job);
  STRATA_CHECK_KIND(ErrorKind::Runtime, rc == 0, "golden case ", c.name, ": training exited with ", rc);
  job.barrier();  // the metrics rank's event file is closed
  if (run.has_metrics) run.values = read_tensorboard_metrics(run.tensorboard_dir, run.train_iters, extracted);

  if (c.test_type == "ckpt-resume") {
    // Megatron's run_ci_test.sh between the two runs: drop the last checkpoint, point the tracker
    // at the middle one.
    if (job.rank() == 0) {
      fs::remove_all(fs::path(ckpt) / checkpoint_dir_name(run.train_iters));
      STRATA_CHECK_KIND(ErrorKind::Runtime,
                        fs::is_directory(fs::path(ckpt) / checkpoint_dir_name(run.resume_iteration)), "golden case ",
                        c.name, ": run 1 wrote no checkpoint at iteration ", run.resume_iteration);
      std::ofstream t(fs::path(ckpt) / kTrackerFile, std::ios::binary | std::ios::trunc);
      t << run.resume_iteration;
    }
    job.barrier();
    StrataConfig resumed = cfg.fields();
    resumed.logging.tensorboard_dir = run.resume_tensorboard_dir;
    const ResolvedConfig cfg2 = resumed.validate(job.size());
    if (options.train_in_new_process && job.size() == 1) {
      const std::string path = (work / "resume_config.yaml").string();
      write_config_file(path, cfg2);
      rc = options.train_in_new_process(path);
    } else {
      rc = train_in_process(cfg2, job);
    }
    STRATA_CHECK_KIND(ErrorKind::Runtime, rc == 0, "golden case ", c.name, ": the resumed run exited with ", rc);
    job.barrier();
    if (run.has_metrics)
      run.resumed =
          steps_after(read_tensorboard_metrics(run.resume_tensorboard_dir, run.train_iters, extracted),
                      run.resume_iteration);
  }
  return run;
}

CaseVerdict check_case_run(const GoldenCase& c, const CaseRun& run, const GoldenValues& golden,
                           const std::string& platform, bool exact) {
  CompareOptions o;
  o.allow_nondeterministic = c.allow_nondeterministic;
  o.record_only = record_only_metrics(platform);
  o.loss_names = run.loss_names;
  CompareOptions vs_golden = o;
  if (!exact) vs_golden.cross_platform = cross_platform_tolerance(run.precision);
  CaseVerdict v;
  std::vector<CheckResult> r = compare(golden, run.values, c.metrics, vs_golden);
  v.passed = all_passed(r);
  v.report = format_report(r, c.name + " (" + c.test_type + ", " + platform + "): run vs golden values");
  if (run.resumed) {
    const std::string after = "steps > " + std::to_string(run.resume_iteration);
    r = compare(steps_after(run.values, run.resume_iteration), *run.resumed, c.metrics, o);
    v.passed = all_passed(r) && v.passed;
    v.report += format_report(r, c.name + ": resumed run vs first run (" + after + ")");
    r = compare(steps_after(golden, run.resume_iteration), *run.resumed, c.metrics, vs_golden);
    v.passed = all_passed(r) && v.passed;
    v.report += format_report(r, c.name + ": resumed run vs golden values (" + after + ")");
  }
  return v;
}

CaseVerdict check_repeatability(const GoldenCase& c, const CaseRun& first, const CaseRun& second,
                                const std::string& platform) {
  // Deterministic checks only, whatever ENV_VARS says: goldens are committed from a reproducible run.
  CompareOptions o;
  o.record_only = record_only_metrics(platform);
  o.loss_names = first.loss_names;
  auto deterministic_only = [](std::vector<CheckResult> r) {
    std::erase_if(r, [](const CheckResult& x) { return x.kind != CheckKind::Deterministic; });
    return r;
  };
  CaseVerdict v;
  std::vector<CheckResult> r = deterministic_only(compare(first.values, second.values, c.metrics, o));
  v.passed = all_passed(r);
  v.report = format_report(r, c.name + ": second run vs first run");
  if (first.resumed && second.resumed) {
    r = deterministic_only(compare(steps_after(first.values, first.resume_iteration), *first.resumed, c.metrics, o));
    v.passed = all_passed(r) && v.passed;
    v.report += format_report(r, c.name + ": resumed run vs first run");
  }
  return v;
}

}  // namespace strata::golden
