// A golden-value test case (tests/functional/<family>/<case>/model_config.yaml) and its runs:
// the file is a Strata config (lower-case sections: model, training, …) plus Megatron's test
// metadata (upper-case keys: TEST_TYPE, MODE, ENV_VARS, METRICS, …). A case is trained
// through the same path as `strata train` (StrataConfig → validate → training::run), then the
// metrics are read back from the TensorBoard event files it wrote (golden_values.h).
// `ckpt-resume`: run 1 trains all train_iters saving every save_interval; then
// iter_<train_iters> is deleted and the tracker set to train_iters/2; run 2 resumes from there
// into a separate TensorBoard directory (in a new process by default).
// A case declares its layout in its `parallel` section (tp 2, pp 2 → 4 ranks; dp > 1 through
// parallel.world_size) and runs under `scripts/mpirun.sh -np N strata golden run <case>`: every
// rank trains its part, the last rank logs the metrics (Megatron's print_rank_last) and decides
// the verdict, which every rank then returns (GoldenJob::agree), so all exit codes are the same.
// Reference: Megatron-LM tests/functional_tests/shell_test_utils/run_ci_test.sh,
// tests/functional_tests/test_cases/*/model_config.yaml.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "training/config/config.h"
#include "training/golden/golden_values.h"

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
// `<dir>/golden_values_<platform>.json`: the case's reference file for `platform`.
std::string golden_file_path(const GoldenCase& c, const std::string& platform);

// The golden file a run on `platform` compares with, and how (docs/reproducibility.md).
struct GoldenChoice {
  std::string path;
  GoldenFile file;
  bool exact = true;   // written with the same numerics as this run: exact checks; else cross-platform
  std::string reason;  // which file, which mode and why (printed by `strata golden run`)
};
// cpu: golden_values_cpu.json and every golden_values_cpu_<tag>.json beside it; the one whose
// recorded platform has this process's numerics (CpuPlatform::same_numerics) is exact. With none,
// golden_values_cpu.json is compared cross-platform. Other platforms (GPUs): the reference file,
// exact. A missing reference file is an error naming it.
GoldenChoice choose_golden_file(const GoldenCase& c, const std::string& platform,
                                const kernels::cpu::CpuPlatform& here);
// Where `strata golden regenerate` writes on `platform`: the cpu file with this process's
// numerics; else the reference file when it is missing or records no platform; else a new
// golden_values_cpu_<here.tag()>.json beside the others.
std::string regenerate_path(const GoldenCase& c, const std::string& platform, const kernels::cpu::CpuPlatform& here);
// Removes the case's golden_values_<platform>_<tag>.json files (`regenerate --drop-other-platforms`).
void remove_platform_variants(const GoldenCase& c, const std::string& platform);

// The case's StrataConfig with Megatron's placeholders ${TENSORBOARD_PATH},
// ${CHECKPOINT_SAVE_PATH}, ${CHECKPOINT_LOAD_PATH} substituted, training.device set for the
// platform ("cpu" → cpu, else cuda), validated for `world_size` processes, which must be the
// case's case_world_size(). Config errors name the file.
ResolvedConfig case_config(const GoldenCase& c, const std::map<std::string, std::string>& placeholders,
                         const std::string& platform, int64_t world_size = 1);

// The number of ranks the case's layout needs: parallel.world_size when set, else
// tp·cp·pp (data-parallel size 1). Reads only the `parallel` section.
int64_t case_world_size(const GoldenCase& c);
// The case's `parallel` section as written (not finalized): what joining the job needs
// (distributed_timeout_minutes for the watchdog).
ParallelConfig case_parallel_config(const GoldenCase& c);

// The job a case runs in: this process alone (world null), or every rank of
// `mpirun -np N strata golden …` (world = an MPI world communicator; the caller keeps MPI
// initialised for the whole command, e.g. with init_distributed).
struct GoldenJob {
  std::shared_ptr<Communicator> world;
  int rank() const { return world ? world->rank() : 0; }
  int size() const { return world ? world->size() : 1; }
  // The rank that logs the metrics (the last one, Megatron's print_rank_last) and judges the run.
  bool is_metrics_rank() const { return rank() == size() - 1; }
  void barrier() const;
  // The metrics rank's `passed`, on every rank (collective).
  bool agree(bool passed) const;
};

// Metrics recorded but not compared on `platform`: iteration-time and mem-* on the CPU (timing and
// host allocator statistics are not reproducible there); none elsewhere (Megatron: rtol 0.05).
std::vector<std::string> record_only_metrics(const std::string& platform);

struct RunOptions {
  std::string platform = "cpu";
  std::string work_dir;  // required; <work>/tensorboard, checkpoints, tensorboard_resume are replaced
  // Runs one `strata train --config FILE`: used for run 2 of ckpt-resume. Null: run it in this
  // process (tests); the command passes a function that starts a new `strata` process.
  // Under mpirun the resumed run is always in this process (a child process is not an MPI rank).
  std::function<int(const std::string& config_path)> train_in_new_process;
  GoldenJob job;  // the ranks running the case (default: this process alone)
};

struct CaseRun {
  int64_t train_iters = 0;
  bool has_metrics = true;              // false on ranks other than the metrics rank (values empty)
  GoldenValues values;                  // run 1, steps 1..train_iters
  std::optional<GoldenValues> resumed;  // ckpt-resume: run 2, steps > resume_iteration
  int64_t resume_iteration = 0;
  std::string tensorboard_dir, resume_tensorboard_dir;
  std::vector<std::string> loss_names;  // the model's named losses (extracted and checked as losses)
  std::string precision = "fp32";       // training.precision: picks the cross-platform tolerance
};

// Trains the case as configured and extracts every whitelisted metric from its event files (on
// the metrics rank). Collective over options.job; the launched world size must equal
// case_world_size() (else a config error naming the file and the mpirun line to use).
CaseRun run_golden_case(const GoldenCase& c, const RunOptions& options);

// The checks of `strata golden run`: run 1 vs the golden values; for ckpt-resume also run 2 vs run
// 1 (steps > resume_iteration, Megatron's resume pipeline) and run 2 vs the golden values.
struct CaseVerdict {
  bool passed = false;
  std::string report;
};
// exact = false: the golden values come from another CPU platform, and their deterministic checks
// become cross-platform ones (cross_platform_tolerance(run.precision)); the resumed-vs-first
// comparison is the same machine's, and stays exact.
CaseVerdict check_case_run(const GoldenCase& c, const CaseRun& run, const GoldenValues& golden,
                           const std::string& platform, bool exact = true);

// The determinism gate of `strata golden regenerate`: two runs must agree exactly (deterministic
// checks of the case's metrics, and the resume comparison for ckpt-resume).
CaseVerdict check_repeatability(const GoldenCase& c, const CaseRun& first, const CaseRun& second,
                                const std::string& platform);

}  // namespace strata::golden
