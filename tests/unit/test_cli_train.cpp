// The `strata` command line through strata_main (apps/strata/cli.h), stdout/stderr captured:
// `strata train` exit codes and messages for bad configs (exit 1, "strata: error: ConfigError:
// section.field: ...") and a good one, --print-config (resolved YAML that loads back),
// --help-config, and `strata preprocess` (files written when the indexed dataset writer is in the
// build, a clear error otherwise).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "apps/strata/cli.h"
#include "cli_test_helpers.h"
#include "test_helpers.h"
#include "training/config.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {


std::filesystem::path temp_dir() { return strata::test::process_temp_dir("strata_test_cli_"); }

std::string write_file(const std::string& name, const std::string& text) {
  const auto p = temp_dir() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

const char* kGood = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n  hidden_size: 64\n"
                    "  num_attention_heads: 4\n";

}  // namespace

TEST_CASE("cli train: a good config validates and prints", "[cli_train]") {
  const std::string good = write_file("good.yaml", kGood);
  CliResult r = run_cli({"train", "--config", good, "--validate-only"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("is valid"));
  CHECK(r.err.empty());

  r = run_cli({"train", "--config", good, "training.train_iters=7", "--print-config"});
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("num_layers: 2"));
  CHECK_THAT(r.out, Contains("train_iters: 7"));
  // The printed config is the resolved one and loads back to the same config.
  StrataConfig back = StrataConfig::from_yaml_text(r.out, {}, "printed.yaml");
  back.validate(1);
  CHECK(back.training.train_iters == 7);
  CHECK(back.model.hidden_size == 64);
  CHECK(back.to_yaml() == r.out);
}

TEST_CASE("cli train: bad configs exit 1 naming the field before anything runs", "[cli_train]") {
  const std::string good = write_file("good.yaml", kGood);
  // 1. a cross-field rule found by validate()
  CliResult r = run_cli({"train", "--config", good, "model.hidden_size=66", "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ConfigError: model.hidden_size: "));
  CHECK(r.out.empty());
  // 2. an unknown key in the file, with a suggestion
  const std::string typo = write_file("typo.yaml", std::string(kGood) + "  hidden_sise: 64\n");
  r = run_cli({"train", "--config", typo});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ConfigError: model.hidden_sise: "));
  CHECK_THAT(r.err, Contains("hidden_size"));
  // 3. a wrong type in an override; the training loop is never reached
  r = run_cli({"train", "--config", good, "training.micro_batch_size=two"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ConfigError: training.micro_batch_size: "));
  CHECK_THAT(r.err, !Contains("training loop"));
  // 4. a required field missing (no learning rate)
  const std::string no_lr = write_file("no_lr.yaml", "data:\n  mock_data: true\n");
  r = run_cli({"train", "--config", no_lr, "--print-config"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ConfigError: optimizer.lr: "));
  CHECK(r.out.empty());
  // No --config at all.
  r = run_cli({"train"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("--config FILE is required"));
  // A usage error is CLI11's (non-zero, not 1).
  r = run_cli({"train", "--no-such-flag"});
  CHECK(r.rc != 0);
}

TEST_CASE("cli train: --help-config lists every field", "[cli_train]") {
  CliResult r = run_cli({"train", "--help-config"});
  CHECK(r.rc == 0);
  CHECK(r.out == StrataConfig::help_text());
  CHECK_THAT(r.out, Contains("num_attention_heads"));
  CHECK_THAT(r.out, Contains("tokenizer_type"));
}

TEST_CASE("cli preprocess: plain text with the byte-level tokenizer", "[cli_train]") {
  const std::string input = write_file("corpus.txt", "first paragraph\nstill first\n\nsecond\n");
  const std::string prefix = (temp_dir() / "out" / "corpus").string();
  CliResult r = run_cli({"preprocess", "--input", input, "--output-prefix", prefix, "--tokenizer-type",
                         "ByteLevelTokenizer", "--split-paragraphs", "--append-eod"});
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("2 documents, 35 tokens"));  // 27 + 1 and 6 + 1
  CHECK(std::filesystem::exists(prefix + "_text_document.idx"));
  CHECK(std::filesystem::file_size(prefix + "_text_document.bin") == 35 * 2);  // uint16 tokens
  r = run_cli({"preprocess", "--input", input, "--output-prefix", prefix, "--tokenizer-type", "Bogus"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("--tokenizer-type 'Bogus' is not one of"));
  r = run_cli({"preprocess", "--input", input});
  CHECK(r.rc != 0);  // missing required options: CLI11's usage error
}
