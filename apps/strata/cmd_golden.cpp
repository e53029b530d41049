// `strata golden run <case-dir> [--platform cpu] [--work-dir D] [--resume-in-process]` trains a
// golden-value case (training/golden/golden_case.h), reads back its TensorBoard event files and compares
// them with <case-dir>/golden_values_<platform>.json by Megatron's rules (training/golden/golden_values.h);
// prints a per-metric report and exits 1 on a mismatch.
// On the CPU the file is chosen by platform fingerprint (golden::choose_golden_file): exact checks
// against a file written with this process's numerics, cross-platform ones otherwise.
// `strata golden regenerate <case-dir> [...]` trains the case twice, requires the two runs to be
// bit-identical, and writes the golden file from the first at full precision, with the platform
// fingerprint: over the file of the same numerics, or as a new file beside the others.
// Under `scripts/mpirun.sh -np N strata golden run|regenerate <case>` (N = the case's layout, its
// `parallel` section) the command joins the job once (init_distributed keeps MPI up across the
// runs), every rank trains, the last rank reads the metrics, prints the report, writes the golden
// file (regenerate) and decides; every rank exits with its verdict. An error on one rank aborts all.
// Reference: Megatron-LM tests/functional_tests/shell_test_utils/run_ci_test.sh; docs/golden_values.md.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/strata/commands.h"
#include "core/error.h"
#include "kernels/cpu/cpu_platform.h"
#include "parallel/distributed.h"
#include "parallel/parallel_config.h"
#include "training/golden/golden_case.h"
#include "training/golden/golden_values.h"

extern char** environ;

namespace strata::app {
namespace {

namespace fs = std::filesystem;

struct GoldenOpts {
  std::string case_dir;
  std::string platform = "cpu";
  std::string work_dir;
  bool resume_in_process = false;
  bool drop_other_platforms = false;  // regenerate: the reference file, other platforms' files removed
};

// `strata train --config FILE` in a new process (this executable), for the resumed run.
int train_in_new_process(const std::string& config_path) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<std::string> args = {"strata", "train", "--config", config_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ);
  STRATA_CHECK_KIND(ErrorKind::Runtime, err == 0, "strata golden: cannot start `strata train --config ", config_path,
                    "`: ", std::strerror(err));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    STRATA_CHECK_KIND(ErrorKind::Runtime, errno == EINTR, "strata golden: waitpid failed: ", std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

golden::RunOptions run_options(const GoldenOpts& o, const golden::GoldenCase& c, const std::string& sub,
                               const golden::GoldenJob& job) {
  golden::RunOptions r;
  r.job = job;
  r.platform = o.platform;
  const std::string base = o.work_dir.empty() ? (fs::path("out") / "golden" / c.name).string() : o.work_dir;
  r.work_dir = sub.empty() ? base : (fs::path(base) / sub).string();
  if (!o.resume_in_process) r.train_in_new_process = train_in_new_process;
  return r;
}

void add_common(CLI::App* cmd, const std::shared_ptr<GoldenOpts>& o) {
  cmd->add_option("case_dir", o->case_dir, "the case directory (holds model_config.yaml)")->required();
  cmd->add_option("--platform", o->platform, "golden file platform: golden_values_<platform>.json (cpu, h200)")
      ->capture_default_str();
  cmd->add_option("--work-dir", o->work_dir, "where the run writes (default out/golden/<case>)");
  cmd->add_flag("--resume-in-process", o->resume_in_process,
                "ckpt-resume: run the resumed half in this process instead of a new `strata train` process");
}

// Runs body as every rank of the launched job (one process without a launcher): MPI stays
// initialised until body returns, and an exception on one rank aborts all of them. The watchdog
// uses the case's parallel.distributed_timeout_minutes.
int in_job(const golden::GoldenCase& c, const std::function<int(const golden::GoldenJob&)>& body) {
  ParallelConfig parallel;
  parallel.distributed_timeout_minutes = golden::case_parallel_config(c).distributed_timeout_minutes;
  const DistributedRuntime rt = init_distributed(parallel, Device::cpu());
  golden::GoldenJob job;
  if (rt.world_size > 1) job.world = rt.world_host;
  return run_or_abort(rt, [&] { return body(job); });
}

int golden_run(const GoldenOpts& o) {
  const golden::GoldenCase c = golden::load_golden_case(o.case_dir);
  // Chosen (and read) before training: a missing file fails at once.
  const golden::GoldenChoice choice = golden::choose_golden_file(c, o.platform, kernels::cpu::cpu_platform());
  return in_job(c, [&](const golden::GoldenJob& job) {
    if (job.is_metrics_rank()) {
      std::printf("strata golden run %s: training %s, then comparing with %s\n  %s\n", c.name.c_str(),
                  c.test_type.c_str(), choice.path.c_str(), choice.reason.c_str());
      std::fflush(stdout);
    }
    const golden::CaseRun run = golden::run_golden_case(c, run_options(o, c, "", job));
    bool passed = false;
    if (run.has_metrics) {  // the last rank: it logged the metrics
      const golden::CaseVerdict v = golden::check_case_run(c, run, choice.file.values, o.platform, choice.exact);
      std::printf("\n golden values: %s\n comparison: %s\n%s", choice.path.c_str(), choice.reason.c_str(),
                  v.report.c_str());
      std::fflush(stdout);
      passed = v.passed;
    }
    return job.agree(passed) ? 0 : 1;
  });
}

int golden_regenerate(const GoldenOpts& o) {
  const golden::GoldenCase c = golden::load_golden_case(o.case_dir);
  return in_job(c, [&](const golden::GoldenJob& job) {
    auto say = [&](const char* what) {
      if (!job.is_metrics_rank()) return;
      std::printf("strata golden regenerate %s: %s\n", c.name.c_str(), what);
      std::fflush(stdout);
    };
    say("training the case (run 1 of 2)");
    const golden::CaseRun first = golden::run_golden_case(c, run_options(o, c, "run1", job));
    say("training it again (run 2 of 2), to check the two runs agree before writing");
    const golden::CaseRun second = golden::run_golden_case(c, run_options(o, c, "run2", job));
    bool passed = false;
    if (first.has_metrics) {
      const golden::CaseVerdict v = golden::check_repeatability(c, first, second, o.platform);
      std::printf("\n%s", v.report.c_str());
      passed = v.passed;
      if (!v.passed) {
        std::fprintf(stderr, "strata golden regenerate: two runs of %s differ; golden values not written\n",
                     c.name.c_str());
      } else {
        const kernels::cpu::CpuPlatform here = kernels::cpu::cpu_platform();
        const std::string path = o.drop_other_platforms ? golden::golden_file_path(c, o.platform)
                                                        : golden::regenerate_path(c, o.platform, here);
        if (o.drop_other_platforms) golden::remove_platform_variants(c, o.platform);
        golden::write_golden_file(path, first.values, o.platform == "cpu" ? &here : nullptr);
        std::printf(" wrote %s (%zu metrics, steps 1-%lld)\n", path.c_str(), first.values.size(),
                    static_cast<long long>(first.train_iters));
      }
      std::fflush(stdout);
    }
    return job.agree(passed) ? 0 : 1;
  });
}

}  // namespace

void register_golden(CLI::App& app) {
  CLI::App* golden = app.add_subcommand("golden", "golden-value regression tests (docs/golden_values.md)");
  golden->require_subcommand(1);
  auto run_opts = std::make_shared<GoldenOpts>();
  CLI::App* run = golden->add_subcommand("run", "train a case and compare its TensorBoard metrics with the golden file");
  add_common(run, run_opts);
  add_runner(run, [run_opts] { return golden_run(*run_opts); });

  auto regen_opts = std::make_shared<GoldenOpts>();
  CLI::App* regen = golden->add_subcommand("regenerate", "train a case twice and rewrite its golden file");
  add_common(regen, regen_opts);
  regen->add_flag("--drop-other-platforms", regen_opts->drop_other_platforms,
                  "after an intended change of the numerics: write golden_values_<platform>.json and remove the "
                  "case's golden_values_<platform>_<tag>.json files of other CPU platforms (now stale)");
  add_runner(regen, [regen_opts] { return golden_regenerate(*regen_opts); });
}

}  // namespace strata::app
