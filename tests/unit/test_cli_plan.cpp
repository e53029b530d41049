// `strata plan` through strata_main (apps/strata/cmd_plan.cpp): the shipped 125M config planned
// for 1024 ranks as JSON (grid, stages, the model's parameter count by the 12h² + 13h formula,
// memory fields consistent with each other, and fast), the text form with --rank, and bad
// layouts rejected like `strata train` does (exit 1, the field named).
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "strata_source_dir.h"
#include "cli_test_helpers.h"
#include "test_helpers.h"

using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {
std::string repo_config(const std::string& name) {
  return (std::filesystem::path(STRATA_SOURCE_DIR) / "configs" / name).string();
}
}  // namespace

TEST_CASE("cli plan: GPT 125M on 1024 ranks as JSON", "[cli_plan]") {
  const auto t0 = std::chrono::steady_clock::now();
  CliResult r = run_cli({"plan", "--config", repo_config("gpt_125m.yaml"), "--world-size", "1024", "--json",
                         "model.vocab_size=50257", "parallel.tensor_model_parallel_size=4",
                         "parallel.pipeline_model_parallel_size=4", "parallel.sequence_parallel=true",
                         "training.global_batch_size=1024", "--rank", "1023"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(seconds < 1.0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["world_size"] == 1024);
  CHECK(j["grid"]["tp"] == 4);
  CHECK(j["grid"]["pp"] == 4);
  CHECK(j["grid"]["dp"] == 64);
  CHECK(j["grid"]["sequence_parallel"] == true);
  CHECK(j["batch"]["num_micro_batches"] == 4);  // 1024 / (4 × 64)
  CHECK(j["pipeline_bubble_fraction"].get<double>() == Approx(3.0 / 4.0));
  const int64_t h = 768, V = 50304, layer = 12 * h * h + 13 * h;
  CHECK(j["model_parameters"] == V * h + 2048 * h + 12 * layer + 2 * h);  // 125,262,336
  CHECK(j["padded_vocab_size"] == 50688);  // the next multiple of 128 × 4
  REQUIRE(j["stages"].size() == 4);
  for (const auto& s : j["stages"]) {
    CHECK(s["chunks"][0]["num_layers"] == 3);
    const auto& m = s["memory_bytes_per_rank"];
    const int64_t n = s["parameters_per_rank"]["total"];
    CHECK(m["weights"] == 2 * n);  // bf16
    CHECK(m["grads"] == 4 * n);
    CHECK(m["optimizer"] == 8 * ((n + 63) / 64));  // distributed optimizer over dp 64
    CHECK(m["total"] == m["weights"].get<int64_t>() + m["main_params"].get<int64_t>() + m["grads"].get<int64_t>() +
                            m["optimizer"].get<int64_t>() + m["activations"].get<int64_t>());
    CHECK(m["activations_full_recompute"].get<int64_t>() < m["activations"].get<int64_t>());
  }
  CHECK(j["stages"][0]["embedding"] == true);
  CHECK(j["stages"][3]["output_layer"] == true);
  // Rank 1023 is the last of the last stage: tp rank 3, dp rank 63, pp rank 3.
  CHECK(j["rank"]["tp_rank"] == 3);
  CHECK(j["rank"]["dp_rank"] == 63);
  CHECK(j["rank"]["pp_rank"] == 3);
  CHECK(j["rank"]["groups"]["pp"] == std::vector<int>{255, 511, 767, 1023});
  CHECK(j["rank"]["groups"]["embedding"] == std::vector<int>{255, 1023});
  CHECK(j["rank"]["groups"]["position_embedding"].is_null());
}

TEST_CASE("cli plan: text form with interleaving and a rank", "[cli_plan]") {
  CliResult r = run_cli({"plan", "--config", repo_config("gpt_tiny.yaml"), "--world-size", "4",
                         "parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2",
                         "training.micro_batch_size=1", "training.global_batch_size=16", "--rank", "1"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("tp 1  cp 1  ep 1  dp 2  pp 2  vpp 2  sp off"));
  CHECK_THAT(r.out, Contains("stage 0: layers 0 | 2, embedding"));  // 4 layers: [0] [2] and [1] [3]
  CHECK_THAT(r.out, Contains("stage 1: layers 1 | 3, output layer"));
  CHECK_THAT(r.out, Contains("pipeline bubble: (pp-1)/(vpp*m) = 0.0625"));  // 1 / (2 × 8)
  CHECK_THAT(r.out, Contains("rank 1: tp 0 cp 0 dp 1 pp 0"));
  CHECK_THAT(r.out, Contains("peak per rank"));
}

TEST_CASE("cli plan: bad layouts fail like train, naming the field", "[cli_plan]") {
  CliResult r = run_cli({"plan", "--config", repo_config("gpt_tiny.yaml"), "--world-size", "6",
                         "parallel.tensor_model_parallel_size=4"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("parallel.world_size"));
  CHECK_THAT(r.err, Contains("not divisible by parallel.tensor_model_parallel_size (4)"));

  r = run_cli({"plan", "--config", repo_config("gpt_tiny.yaml"), "--world-size", "8",
               "parallel.tensor_model_parallel_size=8"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("model.num_attention_heads"));

  r = run_cli({"plan", "--config", repo_config("gpt_125m.yaml"), "--world-size", "8", "data.vocab_file=/nonexistent/v.json"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("set model.vocab_size=N"));

  r = run_cli({"plan", "--config", repo_config("gpt_tiny.yaml"), "--world-size", "0"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("--world-size must be positive"));

  r = run_cli({"plan", "--config", repo_config("gpt_tiny.yaml"), "--world-size", "1", "--rank", "1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("--rank 1 is outside the world of 1 ranks"));
}

TEST_CASE("cli plan: the configured recompute mode's activations (JSON and text)", "[cli_plan][recompute]") {
  const std::vector<std::string> base = {"plan", "--config", repo_config("gpt_125m.yaml"), "--world-size", "8",
                                         "model.vocab_size=50257", "parallel.pipeline_model_parallel_size=2",
                                         "training.global_batch_size=64"};
  auto plan = [&](std::vector<std::string> extra, bool json) {
    std::vector<std::string> a = base;
    if (json) a.push_back("--json");
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  const CliResult none = plan({}, true);
  REQUIRE(none.rc == 0);
  const auto jn = nlohmann::json::parse(none.out);
  CHECK(jn["recompute"] == "none");
  const auto& mn = jn["stages"][0]["memory_bytes_per_rank"];
  CHECK(mn["activations_configured"] == mn["activations"]);
  const std::vector<std::string> block = {"model.recompute_granularity=full", "model.recompute_method=block",
                                          "model.recompute_num_layers=2"};
  const CliResult r = plan(block, true);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["recompute"] == "full block 2");
  const auto& m = j["stages"][0]["memory_bytes_per_rank"];
  CHECK(m["activations_configured"].get<int64_t>() < m["activations"].get<int64_t>());
  CHECK(m["activations_configured"].get<int64_t>() > m["activations_full_recompute"].get<int64_t>());
  const CliResult text = plan(block, false);
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("activations with the configured recompute (full block 2)") != std::string::npos);
}

TEST_CASE("cli plan: a Mamba hybrid with `|` segments over two stages and MTP (JSON and text)", "[cli_plan][hybrid]") {
  const std::vector<std::string> base = {"plan", "--config", repo_config("hybrid_tiny.yaml"), "--world-size", "2",
                                         "model.vocab_size=257", "model.hybrid_layer_pattern=\"M-M*|-ME/M-\"",
                                         "model.mamba_head_dim=64", "model.mamba_num_groups=2",
                                         "model.mamba_state_dim=64", "parallel.pipeline_model_parallel_size=2"};
  std::vector<std::string> a = base;
  a.push_back("--json");
  const CliResult r = run_cli(a);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["stages"].size() == 2);
  CHECK(j["stages"][0]["chunks"][0]["num_layers"] == 4);  // "M-M*"
  CHECK(j["stages"][1]["chunks"][0]["first_layer"] == 4);  // "-ME" (uneven segments), then the MTP depth
  for (const char* k : {"M", "-", "*", "E"}) CHECK(j["hybrid_activation_bytes_per_layer"][k]["no_recompute"] > 0);
  const auto& last = j["stages"][1]["memory_bytes_per_rank"];
  CHECK(last["activations_full_recompute"].get<int64_t>() < last["activations"].get<int64_t>());
  const CliResult text = run_cli(base);
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("hybrid 'M-M*|-ME/M-': activations per layer per micro-batch: M ") != std::string::npos);
}

TEST_CASE("cli plan: the generation cache per token, attention's k and v or MLA's latent and RoPE key", "[cli_plan][mla]") {
  // gpt_tiny: 4 layers, hidden 256, 4 heads (head dim 64, no GQA), fp32.
  const std::vector<std::string> base = {"plan", "--config", repo_config("gpt_tiny.yaml"), "--world-size", "1",
                                         "model.vocab_size=512", "--json"};
  CliResult r = run_cli(base);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(nlohmann::json::parse(r.out)["generation_cache_bytes_per_token"] == 4 * 2 * 4 * 64 * 4);
  std::vector<std::string> mla = base;
  for (const char* o : {"model.multi_latent_attention=true", "model.q_lora_rank=64", "model.kv_lora_rank=32",
                        "model.qk_head_dim=32", "model.qk_pos_emb_head_dim=16", "model.v_head_dim=32"})
    mla.push_back(o);
  r = run_cli(mla);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(nlohmann::json::parse(r.out)["generation_cache_bytes_per_token"] == 4 * (32 + 16) * 4);
}
