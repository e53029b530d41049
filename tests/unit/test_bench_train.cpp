// `strata bench train` (apps/strata/bench_train.h) and the phase timers (core/phase_timer.h):
// step-time statistics on hand-computed lists; a tiny GPT benchmarked through the command line
// (JSON fields, the right number of step times, initial loss ≈ ln(padded vocab), the per-phase
// breakdown covering forward/backward/optimizer and nested under the step time); phase timers
// off by default; bad options rejected with a message naming them; a tiny MoE GPT against the
// PyTorch reference (scripts/bench/moe_torch.py; skipped when /usr/bin/python3 has no torch): both
// start from Strata's parameters and batches, so their losses of two steps agree; MoE options the
// reference does not model are refused naming the field. `strata bench ops --filter` matches the
// printed benchmark names and fails when it matches nothing; the op sweep's options name its binary.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/strata/bench_train.h"
#include "cli_test_helpers.h"
#include "core/phase_timer.h"
#include "kernels/gemm.h"
#include "parallel/process_group.h"
#include "strata_source_dir.h"
#include "test_helpers.h"
#include "training/run.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {
std::filesystem::path temp_dir() { return strata::test::process_temp_dir("strata_test_bench_"); }

// 1 layer, hidden 32, vocab 300 (padded to 384), seq 16, batch 2, mock byte-level tokens.
std::string tiny_config() {
  const auto p = temp_dir() / "tiny.yaml";
  std::ofstream(p) << "model:\n  num_layers: 1\n  hidden_size: 32\n  num_attention_heads: 2\n  seq_length: 16\n"
                      "  vocab_size: 300\n  hidden_dropout: 0.0\n  attention_dropout: 0.0\n"
                      "training:\n  micro_batch_size: 2\n  global_batch_size: 2\n  device: cpu\n"
                      "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n"
                      "checkpoint:\n  save: /nonexistent/never/written\n  save_interval: 1\n";
  return p.string();
}
// The tiny GPT as an MoE model: 4 GeLU experts of 32, softmax top-2, aux_loss and z-loss (large
// coefficients, so a reference without them would train differently), no linear biases.
std::string tiny_moe_config() {
  const auto p = temp_dir() / "tiny_moe.yaml";
  std::ofstream(p) << "model:\n  num_layers: 1\n  hidden_size: 32\n  num_attention_heads: 2\n  seq_length: 16\n"
                      "  vocab_size: 300\n  hidden_dropout: 0.0\n  attention_dropout: 0.0\n  add_bias_linear: false\n"
                      "  num_experts: 4\n  moe_ffn_hidden_size: 32\n  moe_router_topk: 2\n"
                      "  moe_aux_loss_coeff: 0.5\n  moe_z_loss_coeff: 0.1\n"
                      "training:\n  micro_batch_size: 2\n  global_batch_size: 2\n  device: cpu\n"
                      "optimizer:\n  lr: 1.0e-2\ndata:\n  mock_data: true\n";
  return p.string();
}

bool python_has_torch() {
  const int status = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1");
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string torch_script() {
  return (std::filesystem::path(STRATA_SOURCE_DIR) / "scripts" / "bench" / "gpt_train_torch.py").string();
}
}  // namespace

TEST_CASE("bench train: step-time median and p90", "[bench]") {
  app::StepTimes s = app::step_time_stats({5, 1, 4, 2, 3});
  CHECK(s.median_ms == 3);
  CHECK(s.p90_ms == 5);  // nearest rank: ceil(0.9·5) = 5th
  CHECK(s.mean_ms == 3);
  s = app::step_time_stats({10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120});
  CHECK(s.median_ms == 70);  // upper middle of an even count
  CHECK(s.p90_ms == 110);    // ceil(0.9·12) = 11th
  s = app::step_time_stats({});
  CHECK(s.median_ms == 0);
}

TEST_CASE("bench train: a tiny GPT through the command line, JSON and phases", "[bench]") {
  const std::string json_path = (temp_dir() / "bench.json").string();
  CliResult r = run_cli({"bench", "train", "--config", tiny_config(), "--iters", "3", "--warmup", "1", "--phases",
                         "--json", json_path});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("ms/step median"));
  CHECK_THAT(r.err, Contains("bench train: timing Strata (1 warm-up + 3 timed steps)"));  // said while it runs
  nlohmann::json j;
  std::ifstream(json_path) >> j;
  REQUIRE(j["runs"].size() == 1);
  const auto& s = j["runs"][0]["strata"];
  CHECK(s["tokens_per_step"] == 32);
  CHECK(s["step_ms"].size() == 3);
  CHECK(s["median_ms"].get<double>() > 0);
  CHECK(s["p90_ms"].get<double>() >= s["median_ms"].get<double>());
  CHECK(s["tokens_per_second"].get<double>() == Approx(32 * 1000.0 / s["median_ms"].get<double>()));
  CHECK(std::abs(s["initial_loss"].get<double>() - std::log(384.0)) < 0.25);
  CHECK(j["ln_vocab"].get<double>() == Approx(std::log(384.0)));
  CHECK(s["peak_rss_bytes"].get<double>() > 0);
  CHECK(j["ok"] == true);
  // Phases: the three parts of a step, each no longer than the whole step, nested ones no
  // longer than their parent.
  std::map<std::string, double> ph;
  for (const auto& p : s["phases"]) ph[p["phase"].get<std::string>()] = p["ms_per_step"].get<double>();
  for (const char* name : {"zero_grad", "forward", "backward", "optimizer", "forward/output_gemm",
                           "forward/cross_entropy", "backward/layers", "optimizer/adamw"})
    CHECK(ph.count(name) == 1);
  const double mean = s["mean_ms"].get<double>();
  CHECK(ph["forward"] + ph["backward"] + ph["optimizer"] <= 1.05 * mean + 0.5);
  CHECK(ph["forward/layers"] <= ph["forward"] * 1.001 + 1e-3);
  CHECK(ph["optimizer/adamw"] <= ph["optimizer"] * 1.001 + 1e-3);
  CHECK_FALSE(phase_timer::enabled());
  CHECK(s["recompute"] == "none");
  // The model FLOP rate is the model's FLOPs per token times the step's tokens over its median time.
  CHECK(s["model_flops_per_token"].get<double>() > 0);
  CHECK(s["model_gflops_per_second"].get<double>() ==
        Approx(s["model_flops_per_token"].get<double>() * 32 / (s["median_ms"].get<double>() * 1e6)));
  // One step's GEMMs, for the SGEMM reference: [batch, m, n, k, ta, tb, broadcast a, b, count] rows;
  // the output layer's forward (tokens x padded vocab, k = hidden, weight transposed) among them.
  REQUIRE(!s["gemm_shapes"].empty());
  bool output_layer = false;
  for (const auto& row : s["gemm_shapes"]) {
    REQUIRE(row.size() == 9);
    CHECK(row[8].get<int64_t>() >= 1);
    output_layer |= row[1] == 32 && row[2] == 384 && row[5] == 1;
  }
  CHECK(output_layer);
  CHECK_FALSE(kernels::recorded_gemm_shapes().empty());  // recording stopped, the list kept
}

TEST_CASE("bench train: full recompute lowers the peak allocated bytes and is reported", "[bench][recompute]") {
  auto peak = [](const std::vector<std::string>& extra, std::string* mode) {
    const std::string json_path = (temp_dir() / "bench_recompute.json").string();
    std::vector<std::string> a = {"bench", "train", "--config", tiny_config(), "--iters", "1", "--warmup", "0",
                                  "--json", json_path, "model.num_layers=4"};
    a.insert(a.end(), extra.begin(), extra.end());
    CliResult r = run_cli(a);
    INFO(r.out << r.err);
    REQUIRE(r.rc == 0);
    nlohmann::json j;
    std::ifstream(json_path) >> j;
    const auto& s = j["runs"][0]["strata"];
    *mode = s["recompute"].get<std::string>();
    if (!extra.empty()) CHECK_THAT(r.out, Contains("(recompute full uniform 1)"));
    return s["peak_allocated_bytes"].get<int64_t>();
  };
  std::string none_mode, full_mode;
  const int64_t none = peak({}, &none_mode);
  const int64_t full = peak({"model.recompute_granularity=full", "model.recompute_method=uniform",
                             "model.recompute_num_layers=1"}, &full_mode);
  CHECK(none_mode == "none");
  CHECK(full_mode == "full uniform 1");
  CHECK(full < none);
}

TEST_CASE("bench train: bad options are rejected", "[bench]") {
  CliResult r = run_cli({"bench", "train", "--config", tiny_config(), "--reference", "jax"});
  CHECK(r.rc != 0);
  CHECK_THAT(r.out + r.err, Contains("--reference must be 'torch'"));
  r = run_cli({"bench", "train", "--config", tiny_config(), "--iters", "0"});
  CHECK(r.rc != 0);
  CHECK_THAT(r.out + r.err, Contains("--iters must be >= 1"));
  r = run_cli({"bench", "train", "--config", tiny_config(), "model.num_layrs=2"});
  CHECK(r.rc != 0);
  CHECK_THAT(r.out + r.err, Contains("num_layers"));
  // The torch reference only models the GPT-2-style architecture.
  r = run_cli({"bench", "train", "--config", tiny_config(), "model.normalization=RMSNorm", "--reference", "torch"});
  CHECK(r.rc != 0);
  CHECK_THAT(r.out + r.err, Contains("GPT-2-style"));
}

TEST_CASE("phase timers: off by default, totals per name while on", "[bench]") {
  phase_timer::reset();
  REQUIRE_FALSE(phase_timer::enabled());
  { phase_timer::Scope t("test/off"); }
  CHECK(phase_timer::totals().empty());
  phase_timer::set_enabled(true);
  for (int i = 0; i < 3; ++i) {
    phase_timer::Scope t("test/sleep");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  phase_timer::add("test/manual", 1.5);
  phase_timer::set_enabled(false);
  const auto t = phase_timer::totals();
  REQUIRE(t.size() == 2);
  CHECK(t[0].name == "test/sleep");
  CHECK(t[0].calls == 3);
  CHECK(t[0].ms >= 6.0);
  CHECK(t[1].name == "test/manual");
  CHECK(t[1].ms == 1.5);
  phase_timer::reset();
  CHECK(phase_timer::totals().empty());
}

TEST_CASE("phase timers: collectives are timed per group kind", "[bench]") {
  phase_timer::reset();
  phase_timer::set_enabled(true);
  const ProcessGroup cp = ProcessGroup::single("cp");
  const ProcessGroup dp_cp = ProcessGroup::single("dp_cp");
  const ProcessGroup custom = ProcessGroup::single("my_group");
  Tensor t = Tensor::full({4}, 1.0, DType::F32);
  cp.all_reduce(t);
  cp.broadcast(t, 0);
  dp_cp.all_reduce(t);
  custom.all_reduce(t);
  std::vector<PointToPoint> none;
  cp.batch_send_recv(none);  // nothing to exchange: not a call
  phase_timer::set_enabled(false);
  const auto totals = phase_timer::totals();
  REQUIRE(totals.size() == 3);
  CHECK(totals[0].name == "comm/cp");
  CHECK(totals[0].calls == 2);
  CHECK(totals[1].name == "comm/dp_cp");
  CHECK(totals[2].name == "comm/other");
  CHECK(t.to_vector() == std::vector<double>(4, 1.0));  // one rank: the sum is the tensor itself
  phase_timer::reset();
}

TEST_CASE("bench ops: --filter matches the printed names and fails when nothing matches", "[bench]") {
  // The benchmarks honour the filter: only the matching rows are measured and printed.
  CliResult r = run_cli({"bench", "ops", "--quick", "--filter", "softmax_fwd"});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("softmax_fwd"));
  CHECK_THAT(r.out, !Contains("layernorm_fwd") && !Contains("attention_fwd") && !Contains("gemm "));
  r = run_cli({"bench", "ops", "--quick", "--filter", "gelu"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: bench ops: --filter 'gelu' matches no benchmark"));
}

TEST_CASE("bench ops: the op sweep's options fail naming strata_op_sweep", "[bench]") {
  for (const std::string& option : {"--check", "--backend", "--json"}) {
    std::vector<std::string> args = {"bench", "ops", "--quick", option};
    if (option != "--check") args.push_back(option == "--backend" ? "cpu" : "sweep.json");
    CliResult r = run_cli(args);
    INFO(option << ": " << r.out << r.err);
    CHECK(r.rc != 0);
    CHECK_THAT(r.err, Contains("bench ops: " + option) && Contains("run strata_op_sweep"));
    CHECK_THAT(r.out, !Contains("cpu numerics"));  // refused before doing anything
  }
}

TEST_CASE("bench train: dense and MoE GPTs against the PyTorch reference, the losses of two steps agree",
          "[bench][moe]") {
  if (!python_has_torch()) {
    WARN("SKIPPED: /usr/bin/python3 has no torch (scripts/setup.sh --bench)");
    return;
  }
  const std::string json_path = (temp_dir() / "bench_moe.json").string();
  const std::pair<std::string, const char*> cases[] = {
      {tiny_config(), "model.swiglu=true"},  // dense: linear_qkv reordered, biases, SwiGLU
      {tiny_moe_config(), "model.moe_router_score_function=softmax"},
      {tiny_moe_config(), "model.moe_router_score_function=sigmoid model.moe_shared_expert_intermediate_size=16 "
                          "model.moe_shared_expert_gate=true model.moe_router_load_balancing_type=seq_aux_loss"}};
  for (const auto& [config, extra] : cases) {
    const bool moe = config == tiny_moe_config();
    std::vector<std::string> args = {"bench", "train", "--config", config, "--iters", "2", "--warmup", "0",
                                     "--reference", "torch", "--torch-script", torch_script(), "--phases", "--json",
                                     json_path};
    std::istringstream words(extra);
    for (std::string w; words >> w;) args.push_back(w);
    CliResult r = run_cli(args);
    INFO(extra << "\n" << r.out << r.err);
    REQUIRE(r.rc == 0);
    CHECK_THAT(r.out, Contains("losses strata / torch") && Contains("throughput ratio strata / torch"));
    if (moe) CHECK_THAT(r.out, Contains("dispatch share moe/permute/permute_fwd"));
    nlohmann::json j;
    std::ifstream(json_path) >> j;
    const auto& run = j["runs"][0];
    const auto ours = run["strata"]["losses"].get<std::vector<double>>();
    const auto ref = run["torch"]["losses"].get<std::vector<double>>();
    REQUIRE(ours.size() == 2);
    REQUIRE(ref.size() == 2);
    CHECK(std::abs(ours[0] - std::log(384.0)) < 0.25);
    CHECK(ours[1] != ours[0]);  // step 2 sees the update of step 1 (router losses included)
    for (size_t i = 0; i < 2; ++i) CHECK(ref[i] == Approx(ours[i]).margin(1e-4));
    CHECK(run["ratio"].get<double>() > 0);
    CHECK(run["torch"]["peak_rss_bytes"].get<double>() > 0);
    CHECK(run["memory_ratio"].get<double>() ==
          Approx(run["strata"]["peak_rss_bytes"].get<double>() / run["torch"]["peak_rss_bytes"].get<double>()));
    CHECK_THAT(r.out, Contains("peak memory ratio strata / torch"));
    CHECK(j["ok"] == true);
  }
}

TEST_CASE("bench train: MoE options the PyTorch reference does not model are refused, naming the field", "[bench][moe]") {
  const std::pair<const char*, const char*> cases[] = {
      {"model.moe_expert_capacity_factor=1.0", "model.moe_expert_capacity_factor"},
      {"model.moe_input_jitter_eps=0.01", "model.moe_input_jitter_eps"},
      {"model.moe_router_force_load_balancing=true", "model.moe_router_force_load_balancing"},
      {"training.global_batch_size=4", "training.global_batch_size"}};
  for (const auto& [override_, field] : cases) {
    CliResult r = run_cli({"bench", "train", "--config", tiny_moe_config(), "--reference", "torch", override_});
    INFO(override_ << "\n" << r.out << r.err);
    CHECK(r.rc != 0);
    CHECK_THAT(r.err, Contains(field) && Contains("the PyTorch MoE reference does not model"));
    CHECK_THAT(r.out, !Contains("ms/step median"));  // refused before anything ran
  }
}

TEST_CASE("model FLOPs per token: a routed expert's weights count top-k / experts times", "[bench][moe]") {
  // Hand-computed: the same parameters once as dense weights and once as routed experts of a
  // 4-expert top-1 model differ by 6 · 80 · (1 - 1/4) FLOPs per token; a lookup table counts nothing.
  const ResolvedConfig cfg =
      StrataConfig::from_yaml_text(
          "model:\n  num_layers: 1\n  hidden_size: 8\n  num_attention_heads: 2\n  vocab_size: 64\n"
          "  seq_length: 8\n  num_experts: 4\n  moe_router_topk: 1\n  moe_router_pre_softmax: true\n"
          "  moe_ffn_hidden_size: 8\n"
          "  add_bias_linear: false\ntraining:\n  micro_batch_size: 1\noptimizer:\n  lr: 1.0e-3\n"
          "data:\n  mock_data: true\n")
          .validate();
  Parameter dense, expert, table;
  dense.value = Tensor::zeros({10, 10}, DType::F32);
  expert.value = Tensor::zeros({8, 10}, DType::F32);
  table.value = Tensor::zeros({5, 10}, DType::F32);
  table.counted_in_model_flops = false;
  const double as_dense = training::model_flops_per_token(cfg, {&dense, &expert, &table});
  expert.expert_parallel = true;
  const double as_expert = training::model_flops_per_token(cfg, {&dense, &expert, &table});
  CHECK(as_dense - as_expert == Approx(6.0 * 80 * 0.75));
  table.counted_in_model_flops = true;
  CHECK(training::model_flops_per_token(cfg, {&dense, &expert, &table}) - as_expert == Approx(6.0 * 50));
}
