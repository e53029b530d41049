// A golden-value test case (tests/functional/<family>/<case>/model_config.yaml) and its runs:
// the file is a Strata config (lower-case sections: model, training, …) plus Megatron's test
// metadata (upper-case keys: TEST_TYPE, MODE, ENV_VARS, METRICS, …; spec §7.2). A case is trained
// through the same path as `strata train` (StrataConfig → validate → training::run), then the
// metrics are read back from the TensorBoard event files it wrote (golden_values.h).
// `ckpt-resume` (spec §7.6): run 1 trains all train_iters saving every save_interval; then
// iter_<train_iters> is deleted and the tracker set to train_iters/2; run 2 resumes from there
// into a separate TensorBoard directory (in a new process by default).
// Reference: Megatron-LM tests/functional_tests/shell_test_utils/run_ci_test.sh,
// tests/functional_tests/test_cases/*/model_config.yaml.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "training/config.h"
#include "training/golden_values.h"

namespace strata::golden {

struct GoldenCase {
  std::string dir;   // the case directory
  std::string name;  // its last path component
  std::string test_type = "regular";     // TEST_TYPE: regular | ckpt-resume
  std::string mode = "pretraining";      // MODE: only pretraining is run
  std::map<std::string, std::string> env_vars;  // ENV_VARS (exported; see docs/golden_values.md)
  std::vector<std::string> metrics;      // METRICS, default {"lm loss", "num-zeros"}
  bool allow_nondeterministic = false;   // ENV_VARS NVTE_ALLOW_NONDETERMINISTIC_ALGO / NON_DETERMINSTIC_RESULTS = 1
  std::string config_text;               // model_config.yaml, placeholders not yet substituted
};

// Reads `<dir>/model_config.yaml` and checks the metadata (unknown TEST_TYPE / MODE are errors
// naming the file). The Strata sections are checked when a run builds the config.
GoldenCase load_golden_case(const std::string& dir);
// `<dir>/golden_values_<platform>.json`.
std::string golden_file_path(const GoldenCase& c, const std::string& platform);

// The case's StrataConfig with Megatron's placeholders ${TENSORBOARD_PATH},
// ${CHECKPOINT_SAVE_PATH}, ${CHECKPOINT_LOAD_PATH} substituted, training.device set for the
// platform ("cpu" → cpu, else cuda), validated for one process. Config errors name the file.
StrataConfig case_config(const GoldenCase& c, const std::map<std::string, std::string>& placeholders,
                         const std::string& platform);

// Metrics recorded but not compared on `platform`: iteration-time and mem-* on the CPU (timing and
// host allocator statistics are not reproducible there); none elsewhere (Megatron: rtol 0.05).
std::vector<std::string> record_only_metrics(const std::string& platform);

struct RunOptions {
  std::string platform = "cpu";
  std::string work_dir;  // required; <work>/tensorboard, checkpoints, tensorboard_resume are replaced
  // Runs one `strata train --config FILE`: used for run 2 of ckpt-resume. Null: run it in this
  // process (tests); the command passes a function that starts a new `strata` process.
  std::function<int(const std::string& config_path)> train_in_new_process;
};

struct CaseRun {
  int64_t train_iters = 0;
  GoldenValues values;                  // run 1, steps 1..train_iters
  std::optional<GoldenValues> resumed;  // ckpt-resume: run 2, steps > resume_iteration
  int64_t resume_iteration = 0;
  std::string tensorboard_dir, resume_tensorboard_dir;
};

// Trains the case as configured and extracts every whitelisted metric from its event files.
CaseRun run_golden_case(const GoldenCase& c, const RunOptions& options);

// The checks of `strata golden run`: run 1 vs the golden values; for ckpt-resume also run 2 vs run
// 1 (steps > resume_iteration, Megatron's resume pipeline) and run 2 vs the golden values.
struct CaseVerdict {
  bool passed = false;
  std::string report;
};
CaseVerdict check_case_run(const GoldenCase& c, const CaseRun& run, const GoldenValues& golden,
                           const std::string& platform);

// The determinism gate of `strata golden regenerate`: two runs must agree exactly (deterministic
// checks of the case's metrics, and the resume comparison for ckpt-resume).
CaseVerdict check_repeatability(const GoldenCase& c, const CaseRun& first, const CaseRun& second,
                                const std::string& platform);

}  // namespace strata::golden
