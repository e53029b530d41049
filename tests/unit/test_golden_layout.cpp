// Golden cases with a parallel layout (training/golden/golden_case.h): the ranks a case needs
// (parallel.world_size, else tp·cp·pp), its config validated for that many ranks, the rule
// shared with tests/CMakeLists.txt on the committed TP2×PP2 case, and a single-process
// `strata golden run` of a 4-rank case refused before training with the mpirun line to use.
// Reference: Megatron-LM tests/functional_tests (the layout is part of the case's MODEL_ARGS).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_test_helpers.h"
#include "strata_source_dir.h"
#include "test_helpers.h"
#include "training/golden/golden_case.h"

using namespace strata;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A case directory holding `text` as model_config.yaml (and an empty golden file).
std::string write_case(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / ("strata_test_golden_layout_" + std::to_string(::getpid())) / name;
  fs::create_directories(dir);
  std::ofstream(dir / "model_config.yaml") << text;
  std::ofstream(dir / "golden_values_cpu.json") << "{}";
  return dir.string();
}

const char* kModel =
    "TEST_TYPE: regular\nMODE: pretraining\n"
    "model:\n  num_layers: 2\n  hidden_size: 32\n  num_attention_heads: 4\n  seq_length: 16\n"
    "  max_position_embeddings: 16\n  vocab_size: 128\n"
    "training:\n  micro_batch_size: 2\n  global_batch_size: 4\n  train_iters: 2\n"
    "optimizer:\n  lr: 1.0e-3\n"
    "data:\n  mock_data: true\n"
    "logging:\n  log_interval: 1\n  tensorboard_dir: ${TENSORBOARD_PATH}\n";

}  // namespace

TEST_CASE("golden layout: the ranks a case needs come from its parallel section", "[golden]") {
  using golden::case_world_size;
  using golden::load_golden_case;
  CHECK(case_world_size(load_golden_case(write_case("single", kModel))) == 1);
  const std::string tp_pp = write_case(
      "tp2pp2", std::string(kModel) + "parallel:\n  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n");
  CHECK(case_world_size(load_golden_case(tp_pp)) == 4);
  const std::string cp = write_case("cp2", std::string(kModel) + "parallel:\n  context_parallel_size: 2\n");
  CHECK(case_world_size(load_golden_case(cp)) == 2);
  // Data parallelism is declared through world_size: tp 2 × dp 2.
  const std::string dp = write_case(
      "tp2dp2", std::string(kModel) + "parallel:\n  tensor_model_parallel_size: 2\n  world_size: 4\n");
  CHECK(case_world_size(load_golden_case(dp)) == 4);
  // The watchdog's timeout comes from the case (default 10 minutes when the case is silent).
  const std::string timeout = write_case("timeout", std::string(kModel) + "parallel:\n  distributed_timeout_minutes: 3\n");
  CHECK(golden::case_parallel_config(load_golden_case(timeout)).distributed_timeout_minutes == 3);
  CHECK(golden::case_parallel_config(load_golden_case(tp_pp)).distributed_timeout_minutes == 10);

  // The config validates for the layout's ranks (dp = world / (tp·pp·cp)), and not for one.
  const golden::GoldenCase c = load_golden_case(dp);
  const std::map<std::string, std::string> ph = {{"TENSORBOARD_PATH", "/tmp/tb"}};
  const ResolvedConfig cfg = golden::case_config(c, ph, "cpu", 4);
  CHECK(data_parallel_size(*cfg.parallel) == 2);
  CHECK_THROWS_WITH(golden::case_config(c, ph, "cpu", 1), Contains("world_size"));

  // The committed TP2×PP2 case needs 4 ranks (the same rule as tests/CMakeLists.txt's).
  const std::string committed =
      std::string(STRATA_SOURCE_DIR) + "/tests/functional/gpt/gpt_tp2_pp2_sp_layernorm_gelu_learned_tied_dropout";
  CHECK(case_world_size(load_golden_case(committed)) == 4);
  fs::remove_all(fs::path(tp_pp).parent_path());
}

TEST_CASE("golden layout: a 4-rank case run by one process fails before training with the mpirun line",
          "[golden]") {
  const std::string dir = write_case(
      "refused", std::string(kModel) + "parallel:\n  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n");
  const fs::path work = fs::path(dir).parent_path() / "work_refused";
  strata::test::CliResult r = strata::test::run_cli({"golden", "run", dir, "--work-dir", work.string()});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("model_config.yaml: the parallel section needs 4 ranks but 1 were launched"));
  CHECK_THAT(r.err, Contains("scripts/mpirun.sh -np 4 strata golden"));
  CHECK(r.out.find("iteration") == std::string::npos);
  CHECK_FALSE(fs::exists(work / "tensorboard"));
  fs::remove_all(fs::path(dir).parent_path());
}
