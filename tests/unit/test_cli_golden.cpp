// `strata golden run|regenerate` end to end on tiny cases (in process, through strata_main):
// regenerate writes a full-precision golden file only after two identical runs; run passes against
// it, fails (exit 1, the metric and step named) when one golden loss is off by one ULP, and fails
// naming the file when the golden file is missing; a ckpt-resume case resumes from the middle
// checkpoint and matches; golden files keyed by CPU platform (exact on the writer's numerics,
// cross-platform elsewhere, regenerate adds a file beside another platform's). Also: `strata train --help` lists every config field with its default,
// and the TensorBoard "<tag> vs samples" twins (training/observability/metrics_log.h) read back from the events.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "cli_test_helpers.h"
#include "core/formats/tfevents.h"
#include "kernels/cpu/cpu_platform.h"
#include "test_helpers.h"
#include "tests/unit/trainer_test_support.h"
#include "training/config/config.h"
#include "training/golden/golden_case.h"
#include "training/golden/golden_values.h"
#include "training/trainer.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;
namespace fs = std::filesystem;

namespace {

fs::path case_root() {
  const fs::path p = fs::temp_directory_path() / ("strata_test_golden_cli_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

// A small byte-level corpus (400 paragraphs) as a Megatron .bin/.idx dataset under `dir`: building
// the index of a few thousand tokens is instant, where mock data indexes 100000 documents.
std::string tiny_corpus(const fs::path& dir) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "paragraph " + std::to_string(i) + ": the quick brown fox jumps over " + std::to_string(i * 7 % 13) +
            " lazy dogs\n\n";
  std::ofstream(dir / "corpus.txt") << text;
  const std::string prefix = (dir / "corpus").string();
  CliResult r = run_cli({"preprocess", "--input", (dir / "corpus.txt").string(), "--output-prefix", prefix,
                         "--tokenizer-type", "ByteLevelTokenizer", "--split-paragraphs", "--append-eod"});
  REQUIRE(r.rc == 0);
  return prefix + "_text_document";
}

// A tiny case: 2 layers, hidden 32, 6 iterations on tiny_corpus().
std::string tiny_case(const std::string& name, const std::string& test_type, const std::string& extra = "") {
  const fs::path dir = case_root() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string corpus = tiny_corpus(dir);
  std::ofstream(dir / "model_config.yaml") << "ENV_VARS:\n  NVTE_ALLOW_NONDETERMINISTIC_ALGO: 0\n"
                                              "TEST_TYPE: " << test_type << "\nMODE: pretraining\n"
                                              "METRICS: [lm loss, num-zeros, iteration-time, mem-allocated-bytes]\n"
                                              "model:\n  num_layers: 2\n  hidden_size: 32\n  num_attention_heads: 2\n"
                                              "  seq_length: 16\n  max_position_embeddings: 16\n"
                                              "  hidden_dropout: 0.1\n  attention_dropout: 0.1\n"
                                              "training:\n  micro_batch_size: 2\n  global_batch_size: 2\n"
                                              "  train_iters: 6\n  eval_interval: 1000\n  eval_iters: 1\n"
                                              "optimizer:\n  lr: 1.0e-3\n"
                                              "data:\n  data_path: [" << corpus << "]\n  split: \"90, 5, 5\"\n"
                                              "logging:\n  log_interval: 1\n  log_num_zeros_in_grad: true\n"
                                              "  tensorboard_dir: ${TENSORBOARD_PATH}\n"
                                           << extra;
  return dir.string();
}

std::string work_dir(const std::string& name) { return (case_root() / ("work_" + name)).string(); }

}  // namespace

TEST_CASE("cli golden: regenerate, run, and a one-ULP golden change fails", "[golden]") {
  const std::string dir = tiny_case("regular", "regular");
  CliResult r = run_cli({"golden", "regenerate", dir, "--work-dir", work_dir("regular")});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("second run vs first run"));
  CHECK_THAT(r.out, Contains("wrote " + dir + "/golden_values_cpu.json"));
  // It says what it runs, in order.
  const size_t first = r.out.find("training the case (run 1 of 2)"), second = r.out.find("(run 2 of 2)");
  CHECK(first != std::string::npos);
  CHECK(second != std::string::npos);
  CHECK(first < second);
  const std::string golden_path = dir + "/golden_values_cpu.json";
  const golden::GoldenFile written = golden::read_golden_file(golden_path);
  REQUIRE(written.platform.has_value());  // the writer's fingerprint
  CHECK(written.platform->describe() == kernels::cpu::cpu_platform().describe());
  golden::GoldenValues g = written.values;
  for (const char* m : {"lm loss", "num-zeros", "iteration-time", "mem-allocated-bytes", "mem-max-allocated-bytes"}) {
    INFO(m);
    REQUIRE(g.count(m) == 1);
    CHECK(g.at(m).values.size() == 6);
    CHECK(g.at(m).start_step == 1);
    CHECK(g.at(m).end_step == 6);
    CHECK(g.at(m).full_precision);
  }
  // A freshly initialised GPT on 257 byte tokens (padded to 384) starts near ln(384) ≈ 5.95.
  CHECK(std::abs(g.at("lm loss").values.at(1) - std::log(384.0)) < 0.3);
  // The golden values are the TensorBoard scalars of the run (float32 widened to double).
  const double v1 = g.at("lm loss").values.at(1);
  CHECK(static_cast<double>(static_cast<float>(v1)) == v1);

  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("regular")});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("PASS lm loss"));
  CHECK_THAT(r.out, Contains("6/6 points bit-identical"));
  CHECK_THAT(r.out, Contains("exact: the golden file was written with this platform's numerics"));
  CHECK_THAT(r.out, Contains("recorded, not compared"));
  CHECK_THAT(r.out, Contains("result: PASSED"));

  // One ULP off at step 4 fails the deterministic check: exit 1, the metric and the step named.
  g["lm loss"].values[4] = std::nextafter(g["lm loss"].values[4], 0.0);
  golden::write_golden_file(golden_path, g, &*written.platform);
  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("regular")});
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, Contains("FAIL lm loss"));
  CHECK_THAT(r.out, Contains("deterministic 5/6 points bit-identical"));
  CHECK_THAT(r.out, Contains("step 4: golden"));
  CHECK_THAT(r.out, Contains("result: FAILED (lm loss deterministic)"));

  // No golden file: an error naming it, before any training.
  fs::remove(golden_path);
  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("regular")});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains(golden_path));
  CHECK(r.out.find("iteration") == std::string::npos);
  fs::remove_all(dir);
  fs::remove_all(work_dir("regular"));
}

// A golden file from another CPU platform (another OpenBLAS core type): the run says so and
// compares cross-platform at the precision's tolerance — equal values pass, a drift of 200x the
// fp32 tolerance fails; regenerate adds this platform's file beside the other one, which `run`
// then takes exactly; --drop-other-platforms goes back to one reference file.
TEST_CASE("cli golden: files keyed by CPU platform, exact or cross-platform", "[golden][determinism]") {
  const std::string dir = tiny_case("platforms", "regular");
  CliResult r = run_cli({"golden", "regenerate", dir, "--work-dir", work_dir("platforms")});
  REQUIRE(r.rc == 0);
  const std::string reference = dir + "/golden_values_cpu.json";
  golden::GoldenFile foreign = golden::read_golden_file(reference);
  const kernels::cpu::CpuPlatform here = kernels::cpu::cpu_platform();
  kernels::cpu::CpuPlatform other = here;
  other.blas_core = "OtherCore";
  golden::write_golden_file(reference, foreign.values, &other);
  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("platforms")});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("cross-platform: no golden file of this case has this platform's numerics "
                             "(blas_core OtherCore vs " + here.blas_core + ";"));
  CHECK_THAT(r.out, Contains("cross-platform rtol 1e-06: 6/6 points close"));
  CHECK_THAT(r.out, Contains("cross-platform rtol 0 atol 4: 6/6 points close"));
  CHECK(r.out.find("bit-identical") == std::string::npos);

  golden::GoldenValues drifted = foreign.values;
  for (auto& [step, v] : drifted["lm loss"].values)
    if (step >= 3) v *= 1.0 + 2e-4;
  golden::write_golden_file(reference, drifted, &other);
  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("platforms")});
  CHECK(r.rc == 1);
  CHECK_THAT(r.out, Contains("result: FAILED (lm loss cross-platform)"));

  // A file without a platform block (written before fingerprints) is compared cross-platform too.
  golden::write_golden_file(reference, foreign.values);
  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("platforms")});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("cross-platform: the golden file records no platform"));

  // regenerate beside another platform's file: a new file for this platform, taken exactly.
  golden::write_golden_file(reference, drifted, &other);
  r = run_cli({"golden", "regenerate", dir, "--work-dir", work_dir("platforms")});
  REQUIRE(r.rc == 0);
  const std::string variant = dir + "/golden_values_cpu_" + here.tag() + ".json";
  CHECK_THAT(r.out, Contains("wrote " + variant));
  CHECK(golden::read_golden_file(reference).platform->blas_core == "OtherCore");  // untouched
  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("platforms")});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("golden values: " + variant));
  CHECK_THAT(r.out, Contains("6/6 points bit-identical"));

  r = run_cli({"golden", "regenerate", dir, "--work-dir", work_dir("platforms"), "--drop-other-platforms"});
  REQUIRE(r.rc == 0);
  CHECK_FALSE(fs::exists(variant));
  CHECK(golden::read_golden_file(reference).platform->same_numerics(here));
  fs::remove_all(dir);
  fs::remove_all(work_dir("platforms"));
}

TEST_CASE("cli golden: ckpt-resume resumes from train_iters/2 and matches the golden values", "[golden]") {
  const std::string dir = tiny_case("resume", "ckpt-resume",
                                    "checkpoint:\n  save: ${CHECKPOINT_SAVE_PATH}\n  load: ${CHECKPOINT_LOAD_PATH}\n"
                                    "  save_interval: 3\n");
  CliResult r = run_cli({"golden", "regenerate", dir, "--work-dir", work_dir("resume"), "--resume-in-process"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("resumed run vs first run"));
  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("resume"), "--resume-in-process"});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("loaded checkpoint from"));
  CHECK_THAT(r.out, Contains("at iteration 3"));
  CHECK_THAT(r.out, Contains("resumed run vs golden values (steps > 3)"));
  CHECK_THAT(r.out, Contains("3/3 points bit-identical"));
  CHECK_THAT(r.out, Contains("result: PASSED"));
  // Run 2 started from iteration 3: its event file has no step ≤ 3.
  const auto resumed = golden::read_tensorboard_metrics(work_dir("resume") + "/tensorboard_resume", 6);
  CHECK(resumed.at("lm loss").start_step == 4);
  fs::remove_all(dir);
  fs::remove_all(work_dir("resume"));
}

TEST_CASE("cli golden: bad case files are rejected naming the file and key", "[golden]") {
  std::string dir = tiny_case("badtype", "frozen-resume");
  CliResult r = run_cli({"golden", "run", dir});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("model_config.yaml: TEST_TYPE: 'frozen-resume' is not supported"));
  dir = tiny_case("badfield", "regular", "  log_intervall: 1\n");
  std::ofstream(dir + "/golden_values_cpu.json") << "{}";
  r = run_cli({"golden", "run", dir, "--work-dir", work_dir("badfield")});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("logging.log_intervall"));
  CHECK_THAT(r.err, Contains("model_config.yaml"));
  r = run_cli({"golden", "run", (case_root() / "nowhere").string()});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("nowhere/model_config.yaml"));
  fs::remove_all(case_root() / "badtype");
  fs::remove_all(case_root() / "badfield");
  fs::remove_all(work_dir("badfield"));
}

TEST_CASE("cli train: --help lists the usage and every config field with its default and doc", "[golden][cli_train]") {
  CliResult r = run_cli({"train", "--help"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("--config"));
  CHECK_THAT(r.out, Contains("--print-config"));
  int fields = 0;
  for (const auto& sec : StrataConfig::table().sections())
    for (const auto& f : sec.fields) {
      INFO(f.path());
      CHECK_THAT(r.out, Contains("  " + f.path() + " (" + f.type_text() + ", default "));
      CHECK_THAT(r.out, Contains(f.doc));
      ++fields;
    }
  CHECK(fields > 50);
  CHECK_THAT(r.out, Contains(StrataConfig::help_text()));
}

TEST_CASE("metrics log: TensorBoard '<tag> vs samples' twins against consumed samples", "[golden][metrics_log]") {
  CHECK(has_samples_twin("lm loss"));
  CHECK(has_samples_twin("lm loss validation ppl"));
  CHECK(has_samples_twin("grad-norm"));
  CHECK_FALSE(has_samples_twin("iteration-time"));
  CHECK_FALSE(has_samples_twin("mem-max-allocated-bytes"));
  CHECK_FALSE(has_samples_twin("lm loss vs samples"));

  // A real training run (bigram model, 10 iterations of 6 samples, log and eval every 5) writes
  // the twins into its event file.
  const fs::path tb = case_root() / "twins_tb";
  fs::remove_all(tb);
  const ResolvedConfig cfg = test::tiny_config({"training.train_iters=10", "training.eval_interval=5",
                                                "logging.log_num_zeros_in_grad=true",
                                                "logging.tensorboard_dir=" + tb.string()});
  test::BigramModel model(16);
  MockBatchSource train(16, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1, 0);
  MockBatchSource valid(16, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1, 1);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  {
    Trainer trainer(cfg, model, train, &valid, opt);
    trainer.train();
  }
  const auto events = formats::read_tfevents_scalars(golden::first_tfevents_file_with_scalars(tb.string()));
  std::map<std::string, std::map<int64_t, double>> by_tag;
  for (const auto& e : events) by_tag[e.tag][e.step] = e.value;
  for (const char* tag : {"lm loss", "learning-rate", "grad-norm", "num-zeros", "loss-scale", "batch-size",
                          "lm loss validation", "lm loss validation ppl"}) {
    INFO(tag);
    const auto& it = by_tag[tag];
    const auto& twin = by_tag[std::string(tag) + " vs samples"];
    REQUIRE(it.size() == 2);
    REQUIRE(twin.size() == 2);
    // Iterations 5 and 10 of a global batch of 6: consumed samples 30 and 60, the same values.
    CHECK(twin.at(30) == it.at(5));
    CHECK(twin.at(60) == it.at(10));
  }
  CHECK(by_tag["batch-size vs samples"].at(30) == 6.0);
  for (const char* tag : {"iteration-time", "mem-allocated-bytes", "mem-max-allocated-bytes"}) {
    CHECK(by_tag[tag].size() == 2);
    CHECK(by_tag.count(std::string(tag) + " vs samples") == 0);
  }
  fs::remove_all(case_root());
}
