// The one reading of the launched world size (parallel/distributed.h launched_world_size,
// launched_by_mpi_launcher, slurm_tasks_outside_step) with the launchers' environment variables
// set and unset in-process, and `strata train` validating with it: the launcher's count is the
// world size, variables of non-launchers (torchrun's WORLD_SIZE, a Slurm batch script's
// SLURM_NTASKS) are not, and a multi-task Slurm batch script without srun refuses to train.
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_helpers.h"
#include "parallel/distributed.h"
#include "test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {

// Clears every launcher-related variable for the scope of a test and restores them afterwards
// (so the test also holds when the unit tests themselves run under a launcher).
class ScopedLaunchEnv {
 public:
  ScopedLaunchEnv() {
    for (const char* var : kVars) {
      const char* v = std::getenv(var);
      saved_.emplace_back(var, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(var);
    }
  }
  ~ScopedLaunchEnv() {
    for (const auto& [var, value] : saved_) {
      if (value) setenv(var, value->c_str(), 1);
      else unsetenv(var);
    }
  }
  void set(const char* var, const char* value) { setenv(var, value, 1); }
  void unset(const char* var) { unsetenv(var); }

 private:
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                          "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "WORLD_SIZE"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

std::string good_config() {
  const auto p = strata::test::process_temp_dir("strata_test_launch_") / "good.yaml";
  std::ofstream(p) << "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n"
                      "  hidden_size: 64\n  num_attention_heads: 4\ntraining:\n  train_iters: 1\n";
  return p.string();
}

}  // namespace

TEST_CASE("launched_world_size: the launcher's count, in order, else null", "[launch]") {
  ScopedLaunchEnv env;
  CHECK_FALSE(launched_by_mpi_launcher());
  CHECK_FALSE(launched_world_size().has_value());

  env.set("SLURM_STEP_NUM_TASKS", "8");  // any srun step
  CHECK(launched_by_mpi_launcher());
  CHECK(launched_world_size() == 8);
  env.set("PMI_SIZE", "3");  // MPICH/Hydra, srun --mpi=pmi2: read before Slurm's
  CHECK(launched_world_size() == 3);
  env.set("OMPI_COMM_WORLD_SIZE", "4");  // Open MPI: read first
  CHECK(launched_world_size() == 4);

  // A value that is not a positive integer is passed over.
  for (const char* bad : {"abc", "0", "-2", "4x", ""}) {
    env.set("OMPI_COMM_WORLD_SIZE", bad);
    CHECK(launched_world_size() == 3);
  }
  env.unset("OMPI_COMM_WORLD_SIZE");
  env.unset("PMI_SIZE");
  env.unset("SLURM_STEP_NUM_TASKS");

  // PMIX_RANK marks a launch but carries no count.
  env.set("PMIX_RANK", "0");
  CHECK(launched_by_mpi_launcher());
  CHECK_FALSE(launched_world_size().has_value());
}

TEST_CASE("launched_world_size: torchrun's WORLD_SIZE and a batch script's SLURM_NTASKS are no launch", "[launch]") {
  ScopedLaunchEnv env;
  env.set("WORLD_SIZE", "4");
  CHECK_FALSE(launched_by_mpi_launcher());
  CHECK_FALSE(launched_world_size().has_value());
  CHECK_FALSE(slurm_tasks_outside_step().has_value());

  env.set("SLURM_NTASKS", "16");  // the batch script of a 16-task job
  CHECK_FALSE(launched_world_size().has_value());
  CHECK(slurm_tasks_outside_step() == 16);
  env.set("SLURM_NTASKS", "1");
  CHECK_FALSE(slurm_tasks_outside_step().has_value());
  env.set("SLURM_NTASKS", "16");
  env.set("SLURM_STEP_NUM_TASKS", "16");  // inside `srun`: launched, the step's count
  CHECK(launched_world_size() == 16);
  CHECK_FALSE(slurm_tasks_outside_step().has_value());
}

TEST_CASE("cli train: the config is validated with launched_world_size", "[launch][cli_train]") {
  ScopedLaunchEnv env;
  const std::string cfg = good_config();
  // Not launched: world size 1, and parallel.world_size may be set to check a layout.
  CliResult r = run_cli({"train", "--config", cfg, "--print-config"});
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("world_size: 1\n"));
  r = run_cli({"train", "--config", cfg, "parallel.world_size=4", "parallel.tensor_model_parallel_size=2",
               "--validate-only"});
  CHECK(r.rc == 0);
  CHECK(r.err.empty());

  // torchrun's WORLD_SIZE is not an MPI launch: still one process.
  env.set("WORLD_SIZE", "2");
  r = run_cli({"train", "--config", cfg, "--print-config"});
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("world_size: 1\n"));

  // srun's step count is the world size, and a different parallel.world_size is an error.
  env.set("SLURM_STEP_NUM_TASKS", "4");
  r = run_cli({"train", "--config", cfg, "--print-config"});
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("world_size: 4\n"));
  r = run_cli({"train", "--config", cfg, "parallel.world_size=2", "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("parallel.world_size: 2 differs from the number of launched processes (4)"));
}

TEST_CASE("cli train: a multi-task Slurm batch script without srun does not train alone", "[launch][cli_train]") {
  ScopedLaunchEnv env;
  const std::string cfg = good_config();
  env.set("SLURM_NTASKS", "8");
  CliResult r = run_cli({"train", "--config", cfg, "--validate-only"});
  CHECK(r.rc == 0);  // checking the config needs no ranks
  r = run_cli({"train", "--config", cfg});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: "));
  CHECK_THAT(r.err, Contains("Slurm allocation of 8 tasks (SLURM_NTASKS) but was not started by srun"));
  CHECK(r.out.find("iteration") == std::string::npos);  // nothing trained
}
