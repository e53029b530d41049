// The GLM-style mHC configs (configs/glm_mhc.yaml, glm_mhc_tiny.yaml; issue 15): the full-size one
// is checked by `strata plan` — its mHC parameters against a count by hand (2 sites per layer of
// mapping_proj [n²+2n, n·C], three alphas and the bias; the mean contraction has no head) — and
// the tiny one trains on the CPU with the mHC metrics on (Sinkhorn columns sum to 1, the H_res
// entropy is a normalised entropy, the four streams' L2 norms are reported).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_helpers.h"
#include "strata_source_dir.h"
#include "test_helpers.h"
#include "training/config/config.h"
#include "training/planning/memory_plan.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {
const fs::path kRepo = fs::path(STRATA_SOURCE_DIR);
}  // namespace

TEST_CASE("mhc configs: glm_mhc.yaml is a valid 64-rank layout whose mHC parameters strata plan counts",
          "[mhc][memory_plan]") {
  const std::string file = (kRepo / "configs/glm_mhc.yaml").string();
  CliResult p = run_cli({"plan", "--config", file, "--world-size", "64"});
  INFO(p.err);
  REQUIRE(p.rc == 0);
  CHECK_THAT(p.out, Contains("(valid)") && Contains("tp 2") && Contains("pp 4") && Contains("dp 8"));
  CHECK_THAT(p.out, Contains("9.431B parameters"));  // GLM-4-9B's 9.4B plus the mHC sites

  const strata::ResolvedConfig with = strata::StrataConfig::load(file).validate(64);
  REQUIRE(with.model->enable_hyper_connections);
  CHECK(with.model->num_residual_streams == 4);
  CHECK(with.model->mhc_norm_eps_inside_sqrt);
  CHECK(with.model->mhc_keep_mappings_in_fp32);
  CHECK_FALSE(with.model->mhc_learned_output_contract);
  const strata::ResolvedConfig plain =
      strata::StrataConfig::load(file, {"model.enable_hyper_connections=false"}).validate(64);
  const strata::ResolvedModelConfig& without = plain.model;
  const int64_t n = 4, c = 4096, rows = n * n + 2 * n;
  const int64_t per_site = rows * n * c + 3 + rows;
  CHECK(strata::model_parameter_total(with.model) - strata::model_parameter_total(without) == 40 * 2 * per_site);
}

TEST_CASE("mhc configs: glm_mhc_tiny.yaml trains on the CPU with the mHC metrics", "[mhc][cli_train]") {
  const fs::path dir = strata::test::process_temp_dir("strata_test_glm_mhc_") / "run";
  fs::remove_all(dir);
  const std::string jsonl = (dir / "metrics.jsonl").string();
  CliResult r = run_cli({"train", "--config", (kRepo / "configs/glm_mhc_tiny.yaml").string(), "data.data_path=[]",
                         "data.mock_data=true", "training.train_iters=6", "optimizer.lr_warmup_iters=0", "training.eval_interval=100",
                         "training.eval_iters=0", "logging.log_interval=1", "logging.metrics_jsonl=" + jsonl,
                         "logging.tensor_metrics=[layer-mhc-sinkhorn-error:3, layer-mhc-hres-entropy:3, "
                         "layer-mhc-stream-l2:3]",
                         "training.device=cpu"});
  INFO(r.out);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  std::vector<nlohmann::json> metrics;
  double first_loss = 0, last_loss = 0;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("lm loss")) (first_loss == 0 ? first_loss : last_loss) = j["lm loss"].get<double>();
    if (j.contains("tensor-metrics-time")) metrics.push_back(j);
  }
  CHECK(last_loss < first_loss);
  REQUIRE(metrics.size() == 2);  // iterations 3 and 6
  for (const nlohmann::json& m : metrics) {
    CHECK(m.at("tensor-metrics/layer-mhc-sinkhorn-error/global/column").get<double>() < 1e-5);
    CHECK(m.at("tensor-metrics/layer-mhc-sinkhorn-error/global/row").get<double>() < 1e-2);
    const double entropy = m.at("tensor-metrics/layer-mhc-hres-entropy/global").get<double>();
    CHECK(entropy > 0.5);
    CHECK(entropy <= 1.0 + 1e-9);
    for (int j = 0; j < 4; ++j)
      CHECK(m.at("tensor-metrics/layer-mhc-stream-l2/decoder.layers.3/stream-" + std::to_string(j)).get<double>() > 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("mhc configs: the GPU step-time benchmark pair differs only by mHC and plans on one GPU", "[mhc][memory_plan]") {
  // scripts/gpu_check.sh compares these two (docs/performance.md, issue 15).
  for (const char* name : {"configs/bench_gpt_mhc_gpu.yaml", "configs/bench_gpt_gpu_ref.yaml"}) {
    CliResult p = run_cli({"plan", "--config", (kRepo / name).string(), "--world-size", "1"});
    INFO(name << ": " << p.err);
    CHECK(p.rc == 0);
  }
  const strata::ResolvedConfig mhc =  // the fused ops accept its numerics (Megatron dev's)
      strata::StrataConfig::load((kRepo / "configs/bench_gpt_mhc_gpu.yaml").string(), {"model.use_fused_mhc=true"})
          .validate(1);
  const strata::ResolvedConfig plain =
      strata::StrataConfig::load((kRepo / "configs/bench_gpt_gpu_ref.yaml").string()).validate(1);
  CHECK(mhc.model->enable_hyper_connections);
  CHECK_FALSE(plain.model->enable_hyper_connections);
  CHECK(mhc.model->hidden_size == plain.model->hidden_size);
  CHECK(mhc.model->num_layers == plain.model->num_layers);
  CHECK(mhc.model->seq_length == plain.model->seq_length);
  CHECK(mhc.training->micro_batch_size == plain.training->micro_batch_size);
  CHECK(mhc.training->precision == plain.training->precision);
}
