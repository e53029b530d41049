// `strata train` end to end with the sample-order and dataset flags of Megatron (data/random_sampler.h,
// data/data_config.h) on preprocessed text: --train-data-path X (with --valid-data-path) trains on
// exactly the samples of --data-path X --split 1 (the same losses, digit for digit); --dataloader-type
// cyclic trains on another order (other losses), and a run stopped at iteration 2 and resumed from its
// checkpoint continues with the uninterrupted cyclic run's losses (the sampler rebuilt at the
// resumed consumed samples, as Megatron's data loader is).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "apps/strata/cli.h"
#include "cli_test_helpers.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;

namespace {
std::filesystem::path temp_dir() { return strata::test::process_temp_dir("strata_test_cli_order_"); }

std::vector<std::string> losses(const std::string& log) {
  std::vector<std::string> out;
  for (size_t at = log.find("lm loss: "); at != std::string::npos; at = log.find("lm loss: ", at + 1))
    out.push_back(log.substr(at + 9, log.find(' ', at + 9) - at - 9));
  return out;
}
}  // namespace

TEST_CASE("cli train: per-split data paths and the cyclic sampler", "[cli_train][per_split][random_sampler]") {
  std::string text;
  for (int d = 0; d < 80; ++d) text += "Document " + std::to_string(d) + " says something short.\n\n";
  const std::string input = write_text_file(temp_dir(), "docs.txt", text);
  const std::string prefix = (temp_dir() / "docs").string();
  CliResult r = run_cli({"preprocess", "--input", input, "--output-prefix", prefix, "--tokenizer-type",
                         "ByteLevelTokenizer", "--split-paragraphs", "--append-eod"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const std::string data = prefix + "_text_document";
  const std::string yaml = write_text_file(temp_dir(), "order.yaml",
                                           "optimizer:\n  lr: 1.0e-3\nmodel:\n  num_layers: 1\n  hidden_size: 32\n"
                                           "  num_attention_heads: 4\n");
  const std::vector<std::string> common = {"train", "--config", yaml, "model.seq_length=32", "training.train_iters=4",
                                           "training.micro_batch_size=2", "training.global_batch_size=4",
                                           "training.eval_iters=0", "logging.log_interval=1", "training.device=cpu"};
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    const CliResult c = run_cli(a);
    INFO(c.out << c.err);
    REQUIRE(c.rc == 0);
    return c;
  };
  const CliResult whole = train({"--data-path", data, "--split", "1"});
  const CliResult split = train({"--train-data-path", data, "--valid-data-path", data});
  REQUIRE(losses(whole.out).size() == 4u);
  CHECK(losses(split.out) == losses(whole.out));

  const CliResult cyclic = train({"--data-path", data, "--split", "1", "--dataloader-type", "cyclic"});
  REQUIRE(losses(cyclic.out).size() == 4u);
  CHECK(losses(cyclic.out) != losses(whole.out));
  const std::string ckpt = (temp_dir() / "ckpt").string();
  std::filesystem::remove_all(ckpt);
  const CliResult first = train({"--data-path", data, "--split", "1", "--dataloader-type", "cyclic", "--save", ckpt,
                                 "--exit-interval", "2"});
  const CliResult resumed = train({"--data-path", data, "--split", "1", "--dataloader-type", "cyclic", "--load", ckpt});
  std::vector<std::string> joined = losses(first.out);
  for (const std::string& l : losses(resumed.out)) joined.push_back(l);
  CHECK(joined == losses(cyclic.out));
}
