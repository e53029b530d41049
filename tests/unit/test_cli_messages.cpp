// What the command line says to a user who gets something wrong (the second fault run's
// reproductions): an unsorted batch-size schedule is sorted with one warning; --fp16 --bf16 is
// refused; a vocabulary padding past int64 is refused; an fp16 run stuck at its minimum loss scale
// is warned about and, with training.max_consecutive_skipped_iterations, stopped without a
// checkpoint; preprocess errors name the file and line; a switch given a value and out-of-range
// options are named plainly.
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli_test_helpers.h"
#include "test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() { return strata::test::process_temp_dir("strata_test_messages_"); }

std::string write_file(const std::string& name, const std::string& text) {
  return strata::test::write_text_file(temp_dir(), name, text);
}

const char* kModel = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n  hidden_size: 32\n"
                     "  num_attention_heads: 4\n  seq_length: 16\n";

CliResult train(std::vector<std::string> extra) {
  std::vector<std::string> args = {"train", "--config", write_file("messages.yaml", kModel), "training.eval_iters=0",
                                   "logging.log_interval=1", "training.device=cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("messages: a step batch-size schedule out of order is sorted, as Megatron sorts it, with one warning",
          "[cli_train][messages]") {
  CliResult r = train({"--step-batch-size-schedule", "1.6K:8 0:4", "--print-config"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("step_batch_size_schedule: \"0:4 1.6K:8\""));
  CHECK(count(r.err, "is not in increasing threshold order") == 1);
  // In order: no warning.
  r = train({"--step-batch-size-schedule", "0:4 1.6K:8", "--validate-only"});
  CHECK(r.rc == 0);
  CHECK(count(r.err, "increasing threshold order") == 0);
}

TEST_CASE("messages: --fp16 --bf16 is refused naming both, as Megatron refuses it", "[cli_train][messages]") {
  for (const auto& [a, b] : {std::pair{"--fp16", "--bf16"}, std::pair{"--bf16", "--fp16"}}) {
    CliResult r = train({a, b, "--validate-only"});
    INFO(r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains(std::string("ConfigError: training.precision: '") + a + "' and '" + b + "' both set it"));
  }
  CHECK(train({"--bf16", "--bf16", "--validate-only"}).rc == 0);  // the same value twice is no conflict
}

TEST_CASE("messages: a vocabulary padding past int64 is refused by name", "[cli_train][messages]") {
  CliResult r = train({"--make-vocab-size-divisible-by", "9223372036854775807", "model.vocab_size=1000",
                       "--validate-only"});
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("ConfigError: model.make_vocab_size_divisible_by: 9223372036854775807 x "
                             "tensor_model_parallel_size 1 cannot pad a vocabulary of 1000"));
  // 2^62 at tp 2 (the tokenizer's vocabulary: mock data's null tokenizer).
  r = train({"--make-vocab-size-divisible-by", "4611686018427387904", "parallel.world_size=2",
             "parallel.tensor_model_parallel_size=2", "--validate-only"});
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("cannot pad a vocabulary"));
}

TEST_CASE("messages: an fp16 run stuck at its minimum loss scale is warned about, and stopped when asked",
          "[cli_train][messages]") {
  // A scale of 1e30 overflows every fp16 backward, and it may not drop: every step is skipped.
  const std::vector<std::string> stuck = {"--fp16", "--initial-loss-scale", "1e30", "--min-loss-scale", "1e30",
                                          "training.train_iters=5"};
  CliResult r = train(stuck);
  INFO(r.out << r.err);
  CHECK(r.rc == 0);  // Megatron's behaviour: it goes on
  CHECK(count(r.out, "with the fp16 loss scale at its minimum") == 1);
  CHECK_THAT(r.out, Contains("training ended at iteration 5 of 5: 5 iterations this run, 5 skipped in total "
                             "(5 in a row at the end)"));
  const fs::path ckpt = temp_dir() / "stuck_ckpt";
  fs::remove_all(ckpt);
  std::vector<std::string> limited = stuck;
  limited.insert(limited.end(), {"training.max_consecutive_skipped_iterations=3", "checkpoint.save=" + ckpt.string()});
  r = train(limited);
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.out + r.err, Contains("training.max_consecutive_skipped_iterations: iterations 1 to 3 were all skipped"));
  CHECK_THAT(r.out, Contains("training ended at iteration 3 of 5"));
  CHECK_FALSE(fs::exists(ckpt / "latest_checkpointed_iteration.txt"));
  // A successful step resets the count: an fp32 run never reaches it.
  r = train({"training.train_iters=3", "training.max_consecutive_skipped_iterations=1"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("0 skipped in total"));
  fs::remove_all(ckpt);
}

TEST_CASE("messages: preprocess errors name the file and line, and --workers 0 names the range",
          "[cli_train][messages]") {
  const std::string input = write_file("null_ids.txt", "1 2 3\n\n4 5\n6 seven 8\n\n9\n");
  const std::string prefix = (temp_dir() / "null_ids" / "out").string();
  CliResult r = run_cli({"preprocess", "--input", input, "--output-prefix", prefix, "--tokenizer-type",
                         "NullTokenizer", "--vocab-size", "100", "--split-paragraphs"});
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("preprocess: " + input + " line 3: NullTokenizer.encode: 'seven'"));
  const std::string jsonl = write_file("null_ids.jsonl", "{\"text\": \"1 2\"}\n{\"text\": \"3 x\"}\n");
  r = run_cli({"preprocess", "--input", jsonl, "--output-prefix", prefix, "--tokenizer-type", "NullTokenizer",
               "--vocab-size", "100"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains(jsonl + " line 2 (key \"text\")"));
  r = run_cli({"preprocess", "--input", input, "--output-prefix", prefix, "--tokenizer-type", "ByteLevelTokenizer",
               "--workers", "0"});
  INFO(r.err);
  CHECK(r.rc != 0);
  CHECK_THAT(r.err, Contains("--workers: Value 0 not in range 1 to 1024"));
  CHECK(r.err.size() < 300);
}

TEST_CASE("messages: a switch given a value is named as a switch, not answered with the override syntax",
          "[cli_train][messages]") {
  CliResult r = train({"--swiglu", "true", "--validate-only"});
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("'--swiglu' is a switch and takes no value, but 'true' follows it: give the flag alone "
                             "(it sets model.swiglu=true"));
  CHECK(train({"--swiglu", "--validate-only"}).rc == 0);
}

TEST_CASE("messages: generate's sampling flags are checked by name, negative values included", "[cli_train][messages]") {
  const std::string cfg = write_file("generate.yaml", std::string(kModel) + "  vocab_size: 64\n");
  for (const auto& [flag, value, says] :
       {std::tuple{"--top-k", "-1", "--top-k must be >= 0 (0: off), got -1"},
        std::tuple{"--top-p", "-0.5", "--top-p must be in [0, 1] (0: off), got -0.5"},
        std::tuple{"--max-new-tokens", "-3", "--max-new-tokens must be > 0, got -3"}}) {
    CliResult r = run_cli({"generate", "--config", cfg, "--prompt-ids", "1,2,3", flag, value});
    INFO(r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains(std::string("strata: error: ValueError: strata generate: ") + says));
  }
}
