// What a relaunch, a damaged checkpoint directory or a loss without tokens must not do, through
// the `strata train` command line (the second fault run's reproductions):
//  - a relaunched finished run (train_iters already reached) saves nothing: its checkpoint's files,
//    optimizer state included, stay byte for byte, with and without checkpoint.no_load_optim;
//  - a directory holding iteration directories but no tracker is refused, never trained from scratch;
//  - a rolled-back tracker with later iterations: a run that does not load the whole state may not
//    replace them;
//  - a manifest without a config cannot be architecture-checked: refused unless finetune or
//    checkpoint.allow_unchecked_architecture;
//  - a step with no counted token has no loss (not 0.0) in the log line, the JSONL and validation.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_helpers.h"
#include "test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() { return strata::test::process_temp_dir("strata_test_guards_"); }

std::string write_file(const std::string& name, const std::string& text) {
  return strata::test::write_text_file(temp_dir(), name, text);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every file under dir with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read_file(e.path());
  return files;
}

const char* kModel = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n  hidden_size: 32\n"
                     "  num_attention_heads: 4\n  seq_length: 16\n";

CliResult train(const std::string& dir, int64_t iters, std::vector<std::string> extra) {
  const std::string yaml = write_file("guards.yaml", kModel);
  std::vector<std::string> args = {"train", "--config", yaml, "training.train_iters=" + std::to_string(iters),
                                   "training.eval_iters=0", "logging.log_interval=1", "training.device=cpu",
                                   "checkpoint.save=" + dir, "checkpoint.load=" + dir,
                                   // The runs resume with another train_iters, so another learning-rate and
                                   // weight-decay schedule: the config's (Megatron's --override-opt_param-scheduler).
                                   "checkpoint.override_opt_param_scheduler=true"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

}  // namespace

TEST_CASE("run guards: relaunching a finished run saves nothing (no_load_optim does not wipe Adam)",
          "[cli_train][checkpoint][run_guards]") {
  const fs::path base = temp_dir() / "finished";
  fs::remove_all(base);
  const std::string dir = (base / "run").string();
  CliResult r = train(dir, 4, {"checkpoint.save_interval=2"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  const auto before = snapshot(dir);
  REQUIRE(before.count("iter_0000004/manifest.json") == 1);
  // train_iters below and at the checkpoint's iteration, with and without the optimizer state.
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"training.train_iters=2", "checkpoint.no_load_optim=true"}, {"checkpoint.no_load_optim=true"}, {}}) {
    std::vector<std::string> args = extra;
    r = train(dir, 4, args);
    INFO(r.out << r.err);
    REQUIRE(r.rc == 0);
    CHECK_THAT(r.out, !Contains("saved checkpoint"));
    CHECK_THAT(r.out, Contains("nothing to train: the checkpoint is at iteration 4"));
    CHECK(snapshot(dir) == before);
  }
  // A run that trains on saves its new iteration, and only that.
  r = train(dir, 5, {});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("saved checkpoint at iteration 5"));
  auto after = snapshot(dir);
  for (const auto& [name, bytes] : before)
    if (name.rfind("iter_", 0) == 0) CHECK(after.at(name) == bytes);
  fs::remove_all(base);
}

TEST_CASE("run guards: a directory of checkpoints without its tracker is refused, not trained from scratch",
          "[cli_train][checkpoint][run_guards]") {
  const fs::path base = temp_dir() / "no_tracker";
  fs::remove_all(base);
  const std::string dir = (base / "run").string();
  REQUIRE(train(dir, 2, {}).rc == 0);
  fs::remove(fs::path(dir) / "latest_checkpointed_iteration.txt");
  for (bool dry : {true, false}) {
    std::vector<std::string> extra = {};
    if (dry) extra.push_back("--validate-only");
    CliResult r = train(dir, 4, extra);
    INFO(r.out << r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("ConfigError: checkpoint.load: '" + dir + "' holds checkpoints (iterations 2) but no "
                               "latest_checkpointed_iteration.txt") &&
                          Contains("write 2 into it"));
    CHECK_THAT(r.out, !Contains("iteration        1/"));
  }
  CHECK_FALSE(fs::exists(fs::path(dir) / "iter_0000004"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "latest_checkpointed_iteration.txt"));
  // Loading it into another save directory is refused the same way.
  CliResult r = run_cli({"train", "--config", write_file("guards2.yaml", kModel), "training.train_iters=4",
                         "training.eval_iters=0", "training.device=cpu", "checkpoint.load=" + dir,
                         "checkpoint.save=" + (base / "other").string()});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("but no latest_checkpointed_iteration.txt"));
  // An unreadable tracker is named.
  std::ofstream(fs::path(dir) / "latest_checkpointed_iteration.txt") << "twelve";
  r = train(dir, 4, {"--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("latest_checkpointed_iteration.txt' is not an iteration number"));
  // Restored as the message says, the run resumes.
  std::ofstream(fs::path(dir) / "latest_checkpointed_iteration.txt", std::ios::trunc) << "2";
  r = train(dir, 4, {});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("loaded checkpoint from " + dir + " at iteration 2"));
  fs::remove_all(base);
}

TEST_CASE("run guards: later iterations are not replaced by a run that does not load the whole state",
          "[cli_train][checkpoint][run_guards]") {
  const fs::path base = temp_dir() / "rolled_back";
  fs::remove_all(base);
  const std::string dir = (base / "run").string();
  REQUIRE(train(dir, 4, {"checkpoint.save_interval=2"}).rc == 0);
  const std::string iter4 = read_file(fs::path(dir) / "iter_0000004" / "manifest.json");
  std::ofstream(fs::path(dir) / "latest_checkpointed_iteration.txt", std::ios::trunc) << "2";  // Megatron's rollback
  for (const char* flag : {"checkpoint.no_load_optim=true", "checkpoint.no_load_rng=true"}) {
    CliResult r = train(dir, 4, {flag});
    INFO(r.out << r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("holds iterations 4 after the one resumed (2)"));
    CHECK(read_file(fs::path(dir) / "iter_0000004" / "manifest.json") == iter4);
  }
  // Loading the whole state, the rollback retrains and replaces iteration 4 (the same steps again).
  CliResult r = train(dir, 4, {});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("saved checkpoint at iteration 4"));
  fs::remove_all(base);
}

TEST_CASE("run guards: a manifest without a config is refused unless finetune or allow_unchecked_architecture",
          "[cli_train][checkpoint][run_guards]") {
  const fs::path base = temp_dir() / "no_config";
  fs::remove_all(base);
  const std::string dir = (base / "run").string();
  REQUIRE(train(dir, 2, {}).rc == 0);
  const fs::path manifest = fs::path(dir) / "iter_0000002" / "manifest.json";
  nlohmann::json j = nlohmann::json::parse(read_file(manifest));
  REQUIRE(j.contains("config"));
  j.erase("config");
  std::ofstream(manifest, std::ios::trunc) << j.dump(1);
  // Another rotary base and epsilon would load silently before.
  const std::vector<std::string> changed = {"model.position_embedding_type=rope", "model.rotary_base=500",
                                            "model.layernorm_epsilon=1e-3"};
  for (bool dry : {true, false}) {
    std::vector<std::string> extra = changed;
    if (dry) extra.push_back("--validate-only");
    CliResult r = train(dir, 4, extra);
    INFO(r.out << r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("ConfigError: checkpoint.load: '" + dir + "' (iteration 2): its manifest.json has no "
                               "\"config\"") &&
                          Contains("checkpoint.allow_unchecked_architecture=true") &&
                          Contains("checkpoint.finetune=true"));
  }
  CliResult r = train(dir, 4, {"checkpoint.allow_unchecked_architecture=true"});
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("loaded checkpoint from " + dir + " at iteration 2"));
  fs::remove_all(base);
}

TEST_CASE("run guards: a checkpoint's config without a field compares that field's default",
          "[cli_train][checkpoint][run_guards]") {
  const fs::path base = temp_dir() / "old_config";
  fs::remove_all(base);
  const std::string dir = (base / "run").string();
  REQUIRE(train(dir, 2, {}).rc == 0);
  const fs::path manifest = fs::path(dir) / "iter_0000002" / "manifest.json";
  nlohmann::json j = nlohmann::json::parse(read_file(manifest));
  std::string yaml = j.at("config").get<std::string>();
  const size_t at = yaml.find("  layernorm_epsilon:");
  REQUIRE(at != std::string::npos);
  yaml.erase(at, yaml.find('\n', at) - at + 1);  // as written before the field existed
  j["config"] = yaml;
  std::ofstream(manifest, std::ios::trunc) << j.dump(1);
  CliResult r = train(dir, 4, {"model.layernorm_epsilon=1e-3", "--validate-only"});
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("model.layernorm_epsilon: the checkpoint has 1.0e-05, this run 0.001"));
  r = train(dir, 4, {"--validate-only"});
  CHECK(r.rc == 0);
  fs::remove_all(base);
}

TEST_CASE("run guards: a step without a counted token has no loss, not 0.0 (log, JSONL, validation)",
          "[cli_train][run_guards]") {
  // Documents of EOD tokens only (NullTokenizer, vocab 1000: EOD is 999), every label masked.
  std::string text;
  for (int d = 0; d < 50; ++d) text += "999\n\n";
  const std::string input = write_file("all_eod.txt", text);
  const std::string prefix = (temp_dir() / "all_eod" / "ids").string();
  CliResult r = run_cli({"preprocess", "--input", input, "--output-prefix", prefix, "--tokenizer-type",
                         "NullTokenizer", "--vocab-size", "1000", "--split-paragraphs", "--append-eod"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const std::string jsonl = (temp_dir() / "all_eod" / "metrics.jsonl").string();
  fs::remove(jsonl);
  const std::string yaml = write_file("all_eod.yaml", "optimizer:\n  lr: 1.0e-3\nmodel:\n  num_layers: 1\n"
                                                      "  hidden_size: 32\n  num_attention_heads: 4\n"
                                                      "  seq_length: 16\n  position_embedding_type: rope\n");
  r = run_cli({"train", "--config", yaml, "data.data_path=[" + prefix + "_text_document]",
               "data.tokenizer_type=NullTokenizer", "model.vocab_size=1000", "data.split=90,10,0",
               "--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask", "training.train_iters=3",
               "training.eval_interval=3", "training.eval_iters=1", "logging.log_interval=1", "training.device=cpu",
               "logging.metrics_jsonl=" + jsonl});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("iteration        3/"));
  CHECK_THAT(r.out, !Contains("lm loss: "));
  CHECK_THAT(r.out, Contains("validation loss at iteration 3 | lm loss value: none (no counted tokens)"));
  CHECK_THAT(r.out, !Contains("lm loss value: 0") && !Contains("lm loss: 0"));
  // The warning, once.
  const std::string warning = "no token was counted in the loss";
  const std::string all = r.out + r.err;
  REQUIRE(all.find(warning) != std::string::npos);
  CHECK(all.find(warning, all.find(warning) + 1) == std::string::npos);
  std::ifstream in(jsonl);
  int records = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json rec = nlohmann::json::parse(line);
    CHECK_FALSE(rec.contains("lm loss"));
    CHECK_FALSE(rec.contains("lm loss validation"));
    ++records;
  }
  CHECK(records >= 3);
}
