// `strata bench mamba` (apps/strata/bench_mamba.h), a smoke test of the benchmark (not of its
// timings): a tiny mixer shape through the command line prints and writes its fields; with
// /usr/bin/python3's torch the PyTorch reference (scripts/bench/mamba2_torch_ref.py) computes the
// same output, input gradient and parameter gradients as ours (f32 and f64, several groups and
// chunks); bad options are rejected naming them; a missing torch is reported, not an error.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_helpers.h"
#include "strata_source_dir.h"
#include "test_helpers.h"

using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {
std::filesystem::path temp_dir() { return strata::test::process_temp_dir("strata_test_bench_mamba_"); }
bool python_has_torch() {
  const int status = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1");
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
std::string script() {
  return (std::filesystem::path(STRATA_SOURCE_DIR) / "scripts" / "bench" / "mamba2_torch_ref.py").string();
}
// b 2, s 16, hidden 32 (d_inner 64 = 8 heads of 8), state 4 (chunk: the default 128 unless given).
std::vector<std::string> tiny(const std::string& json_path, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"bench", "mamba", "--batch", "2", "--seq", "16", "--hidden", "32", "--head-dim", "8",
                                "--state", "4", "--iters", "2", "--warmup", "0", "--json", json_path};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}
nlohmann::json read_json(const std::string& path) {
  nlohmann::json j;
  std::ifstream(path) >> j;
  return j;
}
}  // namespace

TEST_CASE("bench mamba: a tiny mixer through the command line, fields and JSON", "[bench][mamba]") {
  const std::string path = (temp_dir() / "mamba.json").string();
  const CliResult r = run_cli(tiny(path, {"--groups", "2", "--chunk", "8"}));
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("d_inner 64 = 8 heads x 8, state 4, groups 2, chunk 8"));
  CHECK_THAT(r.out, Contains("fwd+bwd"));
  const nlohmann::json j = read_json(path);
  CHECK(j["heads"] == 8);
  CHECK(j["groups"] == 2);
  REQUIRE(j["runs"].size() == 1);
  const auto& s = j["runs"][0]["strata"];
  CHECK(s["fwd_ms"].get<double>() > 0);
  CHECK(s["bwd_ms"].get<double>() > 0);
  CHECK(s["fwd_bwd_ms"].get<double>() == Approx(s["fwd_ms"].get<double>() + s["bwd_ms"].get<double>()).epsilon(0.5));
  CHECK(j["ok"] == true);
}

TEST_CASE("bench mamba: the PyTorch reference computes what the mixer computes", "[bench][mamba]") {
  if (!python_has_torch()) {
    WARN("skipped: /usr/bin/python3 has no torch (scripts/setup.sh --bench)");
    return;
  }
  for (const auto& [dtype, groups, chunk] : {std::tuple{"f32", "1", "8"}, std::tuple{"f32", "4", "4"},
                                             std::tuple{"f64", "2", "16"}}) {
    const std::string path = (temp_dir() / "mamba_ref.json").string();
    const CliResult r = run_cli(tiny(path, {"--dtype", dtype, "--groups", groups, "--chunk", chunk, "--reference",
                                            "torch", "--torch-script", script()}));
    INFO(dtype << " groups " << groups << " chunk " << chunk << "\n" << r.out << r.err);
    REQUIRE(r.rc == 0);
    CHECK_THAT(r.out, Contains("speed ratio torch / strata"));
    const nlohmann::json j = read_json(path);
    const auto& t = j["runs"][0]["torch"];
    CHECK(t["max_rel_err"].get<double>() < (std::string(dtype) == "f64" ? 1e-10 : 2e-4));
    CHECK(t["errors"].size() == 11);  // y, dx and the 9 parameters
    CHECK(t["fwd_bwd_ms"].get<double>() > 0);
    CHECK(j["median_ratio"].get<double>() > 0);
  }
}

TEST_CASE("bench mamba: a missing torch is reported and ours still timed, bad options named", "[bench][mamba]") {
  const std::string path = (temp_dir() / "mamba_notorch.json").string();
  // A "python" without torch: the script's own import fails and it exits 77.
  const auto fake = temp_dir() / "python_without_torch";
  std::ofstream(fake) << "#!/bin/sh\nexec /usr/bin/python3 -c 'import sys; sys.modules[\"torch\"] = None; "
                         "sys.argv = sys.argv[1:]; exec(open(sys.argv[0]).read())' \"$@\"\n";
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  CliResult r = run_cli(
      tiny(path, {"--chunk", "8", "--reference", "torch", "--python", fake.string(), "--torch-script", script()}));
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("reference: skipped"));
  CHECK_THAT(r.out, Contains("fwd+bwd"));
  r = run_cli(tiny(path, {"--dtype", "bf16"}));
  CHECK(r.rc != 0);
  CHECK_THAT(r.err, Contains("--dtype must be f32 or f64"));
  r = run_cli({"bench", "mamba", "--seq", "12", "--chunk", "8", "--reference", "torch"});
  CHECK(r.rc != 0);
  CHECK_THAT(r.err, Contains("--seq (12) to be a multiple of --chunk (8)"));
  r = run_cli(tiny(path, {"--groups", "3"}));
  CHECK(r.rc != 0);
  CHECK_THAT(r.err, Contains("model.mamba_num_groups"));
}
