// `strata bench recompute` (apps/strata/bench_recompute.h), a smoke test of the benchmark (not of
// its timings): the mode names and their overrides; a tiny Mamba hybrid through the command line
// under none / full uniform / full block / selective mlp with a GPT to compare — every mode's
// fields, bit-identical losses, full recompute saving allocator bytes, the plan's estimate next to
// it (for the hybrid too), the tokens/s ratio; bad mode names rejected naming --modes.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/strata/bench_recompute.h"
#include "cli_test_helpers.h"
#include "test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {
std::filesystem::path temp_dir() { return strata::test::process_temp_dir("strata_test_bench_recompute_"); }
// "M*M-": hidden 32, d_inner 64 = 8 heads of 8, state 4, chunk 8; seq 16, batch 2, vocab 300.
std::string write_config(const std::string& name, const std::string& layers) {
  const auto p = temp_dir() / name;
  std::ofstream(p) << "model:\n" << layers
                   << "  hidden_size: 32\n  num_attention_heads: 2\n  seq_length: 16\n  vocab_size: 300\n"
                      "  normalization: RMSNorm\n  position_embedding_type: rope\n  add_bias_linear: false\n"
                      "  hidden_dropout: 0.0\n  attention_dropout: 0.0\n"
                      "training:\n  micro_batch_size: 2\n  global_batch_size: 2\n  device: cpu\n"
                      "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";
  return p.string();
}
std::string hybrid_yaml() {
  return write_config("hybrid.yaml", "  hybrid_layer_pattern: \"M*M-\"\n  mamba_head_dim: 8\n  mamba_num_groups: 2\n"
                                     "  mamba_state_dim: 4\n  mamba_chunk_size: 8\n");
}
std::string gpt() { return write_config("gpt.yaml", "  num_layers: 2\n"); }
}  // namespace

TEST_CASE("bench recompute: mode names and their overrides", "[bench][recompute]") {
  CHECK(app::recompute_mode_overrides("none", 8) == std::vector<std::string>{"model.recompute_granularity=null"});
  CHECK(app::recompute_mode_overrides("full_uniform", 8) ==
        std::vector<std::string>{"model.recompute_granularity=full", "model.recompute_method=uniform",
                                 "model.recompute_num_layers=1"});
  CHECK(app::recompute_mode_overrides("full_block", 8).back() == "model.recompute_num_layers=4");
  CHECK(app::recompute_mode_overrides("full_block:3", 8).back() == "model.recompute_num_layers=3");
  CHECK(app::recompute_mode_overrides("full_block", 1).back() == "model.recompute_num_layers=1");
  CHECK(app::recompute_mode_overrides("selective:mlp,moe", 8) ==
        std::vector<std::string>{"model.recompute_granularity=selective", "model.recompute_modules=[mlp,moe]"});
  for (const char* bad : {"full", "selective", "none:2", "block"})
    CHECK_THROWS_WITH(app::recompute_mode_overrides(bad, 8), Contains("--modes: '" + std::string(bad) + "'"));
}

TEST_CASE("bench recompute: a tiny hybrid under every mode, against a GPT", "[bench][recompute]") {
  const std::string path = (temp_dir() / "recompute.json").string();
  const CliResult r = run_cli({"bench", "recompute", "--config", hybrid_yaml(), "--compare-config", gpt(), "--iters", "2",
                               "--warmup", "0", "--json", path});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("tokens/s hybrid (no recompute)"));
  nlohmann::json j;
  std::ifstream(path) >> j;
  CHECK(j["tokens_per_step"] == 32);
  CHECK(j["losses_identical"] == true);
  REQUIRE(j["modes"].size() == 4);
  std::map<std::string, nlohmann::json> m;
  for (const auto& v : j["modes"]) m[v["mode"].get<std::string>()] = v;
  CHECK(m["none"]["recompute"] == "none");
  CHECK(m["full_uniform"]["recompute"] == "full uniform 1");
  CHECK(m["full_block"]["recompute"] == "full block 2");
  CHECK(m["selective:mlp"]["recompute"] == "selective mlp");
  CHECK(m["none"]["saved_bytes"].get<double>() == 0);
  CHECK(m["full_uniform"]["saved_bytes"].get<double>() > 0);
  CHECK_THAT(r.out, !Contains("no plan estimate"));  // strata plan counts hybrid models
  CHECK(m["none"]["planned_activation_bytes"].get<double>() > 0);
  CHECK(m["full_uniform"]["planned_saved_bytes"].get<double>() > 0);
  for (const auto& [name, v] : m) {
    INFO(name);
    CHECK(v["losses_identical_to_none"] == true);
    CHECK(v["median_ms"].size() == 1);
    CHECK(v["time_ratio_to_none"].get<double>() > 0);
    CHECK(v["peak_allocated_bytes"][0].get<double>() > 0);
    CHECK(v["planned_activation_bytes"].get<double>() > 0);  // the plan counts hybrid models
  }
  CHECK(j["compare"]["tokens_per_second_ratio"].get<double>() > 0);
}

TEST_CASE("bench recompute: a GPT with the plan's estimate next to the measured saving", "[bench][recompute]") {
  const std::string path = (temp_dir() / "recompute_gpt.json").string();
  const CliResult r = run_cli({"bench", "recompute", "--config", gpt(), "--modes", "none", "full_uniform",
                               "selective:mlp", "--iters", "1", "--warmup", "0", "--json", path});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  nlohmann::json j;
  std::ifstream(path) >> j;
  REQUIRE(j["modes"].size() == 3);
  CHECK(j["losses_identical"] == true);
  const auto &none = j["modes"][0], &full = j["modes"][1], &mlp = j["modes"][2];
  CHECK(none["planned_activation_bytes"].get<double>() > full["planned_activation_bytes"].get<double>());
  CHECK(full["planned_saved_bytes"].get<double>() > 0);
  CHECK(mlp["planned_saved_bytes"].get<double>() > 0);
  CHECK(full["saved_bytes"].get<double>() > 0);
  CHECK(mlp["saved_bytes"].get<double>() > 0);
}

TEST_CASE("bench recompute: bad modes are named before anything runs", "[bench][recompute]") {
  CliResult r = run_cli({"bench", "recompute", "--config", hybrid_yaml(), "--modes", "none", "full"});
  CHECK(r.rc != 0);
  CHECK_THAT(r.err, Contains("--modes: 'full'"));
  r = run_cli({"bench", "recompute", "--config", hybrid_yaml(), "--modes", "full_uniform"});
  CHECK(r.rc != 0);
  CHECK_THAT(r.err, Contains("--modes must start with none"));
}
