// `strata train` / `strata plan` with Megatron-LM flags on the command line (core/megatron_flags.h):
// configs/gpt_tiny.yaml plus a Megatron-style argument list trains for 2 iterations and saves, the
// flags without effect are listed in one line, and the errors reach the user as
// "strata: error: ConfigError: ..." with exit code 1 (unknown flag with a suggestion that includes
// the subcommand's own options, unsupported feature).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_helpers.h"
#include "strata_source_dir.h"

using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;
namespace fs = std::filesystem;

namespace {
const fs::path kRepo = fs::path(STRATA_SOURCE_DIR);

std::vector<nlohmann::json> read_jsonl(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}
}  // namespace

TEST_CASE("cli train: gpt_tiny.yaml with Megatron flags trains", "[cli_train][megatron_flags]") {
  const fs::path dir = strata::test::process_temp_dir("strata_test_megatron_flags_") / "run";
  fs::remove_all(dir);
  const std::string save = (dir / "ckpt").string(), jsonl = (dir / "metrics.jsonl").string();
  CliResult r = run_cli({"train", "--config", (kRepo / "configs/gpt_tiny.yaml").string(),
                         // Megatron's spelling, as a launch script passes it
                         "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                         "32", "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size",
                         "4", "--train-iters", "2", "--lr", "3e-4", "--lr-warmup-iters", "0", "--min-lr", "0",
                         "--bf16", "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                         "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--data-path",
                         "--mock-data", "--eval-interval", "2", "--eval-iters", "1", "--log-interval", "1", "--save",
                         save, "--save-interval", "2", "--tensorboard-dir", (dir / "tb").string(),
                         "--use-mcore-models", "--transformer-impl", "local", "--distributed-backend", "nccl",
                         // mixed with Strata's overrides
                         "logging.metrics_jsonl=" + jsonl, "training.device=cpu"});
  INFO(r.out);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.err, Contains("strata: Megatron flags accepted without effect (they choose Megatron's implementation "
                             "and change no numbers): --use-mcore-models, --transformer-impl local, "
                             "--distributed-backend nccl\n"));
  auto arg = [](const std::string& name, const std::string& value) {
    return "\n  " + name + " " + std::string(48 - name.size(), '.') + " " + value + "\n";
  };
  CHECK_THAT(r.out, Contains(arg("num_layers", "2")));
  CHECK_THAT(r.out, Contains(arg("precision", "bf16")));
  CHECK_THAT(r.out, Contains(arg("add_bias_linear", "False")));
  CHECK_THAT(r.out, Contains(arg("untie_embeddings_and_output_weights", "True")));
  CHECK_THAT(r.out, Contains(arg("lr", "0.0003")));
  // Two iterations trained and logged, one evaluation, a checkpoint at iteration 2.
  std::vector<nlohmann::json> recs = read_jsonl(jsonl);
  int train = 0, valid = 0;
  for (const auto& j : recs) {
    if (j.contains("lm loss")) ++train;
    if (j.contains("lm loss validation")) ++valid;
  }
  CHECK(train == 2);
  CHECK(valid == 1);
  std::ifstream tracker(fs::path(save) / "latest_checkpointed_iteration.txt");
  std::string it;
  tracker >> it;
  CHECK(it == "2");
}

TEST_CASE("cli train and plan: Megatron flag errors exit 1 with the message", "[cli_train][megatron_flags]") {
  const std::string cfg = (kRepo / "configs/gpt_tiny.yaml").string();
  CliResult r = run_cli({"train", "--config", cfg, "--use-torch-fsdp2", "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ConfigError: --use-torch-fsdp2: not supported by Strata: "
                             "FSDP (use --use-distributed-optimizer)"));
  r = run_cli({"train", "--config", cfg, "--print-confg"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("unknown flag '--print-confg'; did you mean '--print-config'?"));
  r = run_cli({"train", "--config", cfg, "training.bf16=true", "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("did you mean 'training.precision=bf16'?"));
  // plan takes the same flags: tp 2 x pp 2 of gpt_tiny on 8 ranks.
  r = run_cli({"plan", "--config", cfg, "--world-size", "8", "--tensor-model-parallel-size", "2",
               "--pipeline-model-parallel-size", "2", "--global-batch-size", "16", "--json", "--use-mcore-models"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["grid"]["tp"] == 2);
  CHECK(j["grid"]["pp"] == 2);
  CHECK_THAT(r.err, Contains("--use-mcore-models"));
}

TEST_CASE("cli train: moe_tiny.yaml with Megatron's MoE flags trains, logs the router losses, generates",
          "[cli_train][moe_layer]") {
  const fs::path dir = strata::test::process_temp_dir("strata_test_moe_cli_") / "run";
  fs::remove_all(dir);
  const std::string save = (dir / "ckpt").string(), jsonl = (dir / "metrics.jsonl").string();
  CliResult r = run_cli({"train", "--config", (kRepo / "configs/moe_tiny.yaml").string(), "--num-layers", "2",
                         "--hidden-size", "32", "--ffn-hidden-size", "64", "--seq-length", "16",
                         "--max-position-embeddings", "16", "--num-experts", "4", "--moe-ffn-hidden-size", "32",
                         "--moe-router-topk", "2", "--moe-aux-loss-coeff", "0.02", "--train-iters", "3",
                         "--micro-batch-size", "2", "--global-batch-size", "4", "--data-path", "--mock-data",
                         "--eval-iters", "0", "--log-interval", "1", "--save", save, "--save-interval", "3",
                         "--lr-warmup-iters", "0", "logging.metrics_jsonl=" + jsonl,
                         "logging.tensorboard_dir=" + (dir / "tb").string(), "training.device=cpu"});
  INFO(r.out);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("| load_balancing_loss: ") && Contains("| z_loss: "));
  const std::vector<nlohmann::json> recs = read_jsonl(jsonl);
  REQUIRE(recs.size() == 3);
  CHECK(recs[0].contains("load_balancing_loss"));
  CHECK(recs[0]["load_balancing_loss"].get<double>() > 0.5);  // E·Σ f·P ≈ 1 when balanced, ≥ 1 always
  CliResult p = run_cli({"plan", "--config", (kRepo / "configs/moe_tiny.yaml").string(), "--world-size", "2"});
  INFO(p.err);
  CHECK(p.rc == 0);  // MoE layers are counted (training/planning/moe_plan.h)
  CHECK_THAT(p.out, Contains("MoE: ") && Contains(" expert; "));
  CliResult g = run_cli({"generate", "--load", save, "--prompt", "abc", "--score"});
  INFO(g.err);
  CHECK(g.rc == 0);
  CHECK_THAT(g.out, Contains("\"logprobs\":[null,"));
  fs::remove_all(dir);
}

namespace strata {

// Megatron's pretrain_gpt.py takes its whole configuration from flags; so does `strata train`
// without --config. --sequence-parallel at tensor-parallel size 1 is disabled with Megatron's
// warning; --spec naming Megatron's standard spec is accepted, any other refused by name; user
// errors carry no source path.
TEST_CASE("cli train: flags alone train as pretrain_gpt.py, SP at TP1 warns, --spec and --profile", "[cli_train][megatron_flags]") {
  const std::vector<std::string> flags = {
      "train", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
      "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters",
      "2", "--lr", "1e-3", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128",
      "--log-interval", "1", "--sequence-parallel", "--spec", "megatron.core.models.gpt.gpt_layer_specs",
      "get_gpt_layer_with_transformer_engine_spec", "--manual-gc", "--empty-unused-memory-level", "0",
      "training.device=cpu"};
  CliResult r = run_cli(flags);
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("iteration        2/"));
  CHECK_THAT(r.out + r.err, Contains("Disabling sequence parallelism because tensor model parallelism is disabled"));
  CHECK_THAT(r.out + r.err, Contains("--manual-gc") && Contains("--empty-unused-memory-level 0"));
  std::vector<std::string> custom = flags;
  custom.insert(custom.begin() + 1, {"--spec", "my_models.specs", "my_spec"});
  r = run_cli(custom);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("--spec: 'my_models.specs my_spec' is not supported by Strata") &&
                        Contains("hybrid_stack_spec"));
  // --profile: a Chrome trace of iterations 2 and 3 (Megatron: after profile_step_start = 1
  // iterations, up to profile_step_end = 3), written to the TensorBoard directory.
  const fs::path tb = test::process_temp_dir("strata_profile") / "tb";
  std::vector<std::string> profiled = flags;
  profiled.insert(profiled.end(), {"--train-iters", "4", "--profile", "--profile-step-start", "1", "--profile-step-end",
                                   "3", "--tensorboard-dir", tb.string()});
  r = run_cli(profiled);
  CHECK(r.rc == 0);
  const fs::path trace = tb / "trace_rank0_iterations2-3.json";
  REQUIRE(fs::exists(trace));
  const nlohmann::json events = nlohmann::json::parse(std::ifstream(trace))["traceEvents"];
  std::vector<std::pair<double, double>> iterations;
  for (const auto& e : events)
    if (e["name"] == "iteration") iterations.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  CHECK(iterations.size() == 2);
  bool forward = false;
  for (const auto& e : events) {  // every event complete ("X") and inside one of the two iterations
    CHECK(e["ph"] == "X");
    const double t0 = e["ts"].get<double>(), t1 = t0 + e["dur"].get<double>();
    bool inside = false;
    for (const auto& [a, b] : iterations) inside = inside || (t0 >= a && t1 <= b + 1e-3);
    CHECK(inside);
    forward = forward || e["name"] == "forward";
  }
  CHECK(forward);
  // A user error that is not a config error: its kind and message, no source file.
  r = run_cli({"generate", "--load", "/nonexistent/strata_checkpoints", "--prompt-ids", "1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ") && !Contains(".cpp:"));
}

}  // namespace strata
