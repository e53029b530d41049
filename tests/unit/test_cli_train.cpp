// The `strata` command line through strata_main (apps/strata/cli.h), stdout/stderr captured:
// `strata train` exit codes and messages for bad configs (exit 1, "strata: error: ConfigError:
// section.field: ...") and a good one, --print-config (resolved YAML that loads back),
// --help-config, and `strata preprocess` (files written when the indexed dataset writer is in the
// build, a clear error otherwise); an unknown command is named with the list of commands.
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
#include "training/config/config.h"
#include "training/planning/memory_check.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {


std::filesystem::path temp_dir() { return strata::test::process_temp_dir("strata_test_cli_"); }

std::string write_file(const std::string& name, const std::string& text) {
  return strata::test::write_text_file(temp_dir(), name, text);
}

// The lm losses of a training log, in order, as printed.
std::vector<std::string> losses(const std::string& log) {
  std::vector<std::string> out;
  for (size_t at = log.find("lm loss: "); at != std::string::npos; at = log.find("lm loss: ", at + 1))
    out.push_back(log.substr(at + 9, log.find(' ', at + 9) - at - 9));
  return out;
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
  const ResolvedConfig back = StrataConfig::from_yaml_text(r.out, {}, "printed.yaml").validate(1);
  CHECK(back.training->train_iters == 7);
  CHECK(back.model->hidden_size == 64);
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
  // 5. a directory as --config (an ifstream reads it as an empty file: the defaults)
  const std::string dir = temp_dir().string();
  r = run_cli({"train", "--config", dir, "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ConfigError: (file): config file '" + dir + "' is a directory"));
  CHECK(r.out.empty());
  // No --config at all: the defaults, which need a learning rate (Megatron's --lr).
  r = run_cli({"train", "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("ConfigError: optimizer.lr: required"));
  CHECK_THAT(r.err, !Contains(".cpp:"));
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

TEST_CASE("cli preprocess: inputs without a document are an error naming them, nothing written", "[cli_train]") {
  // It wrote a 0-document dataset and exited 0.
  const std::string empty = write_file("empty_corpus.txt", ""), blank = write_file("blank_corpus.txt", "  \n\n \n");
  const std::string prefix = (temp_dir() / "empty_out" / "corpus").string();
  CliResult r = run_cli({"preprocess", "--input", empty, "--output-prefix", prefix, "--tokenizer-type",
                         "ByteLevelTokenizer", "--append-eod"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ") && Contains("no documents in '" + empty + "'"));
  CHECK_FALSE(std::filesystem::exists(prefix + "_text_document.bin"));
  CHECK_FALSE(std::filesystem::exists(prefix + "_text_document.bin.tmp"));
  CHECK_FALSE(std::filesystem::exists(prefix + "_text_document.idx"));
  r = run_cli({"preprocess", "--input", empty, blank, "--output-prefix", prefix, "--tokenizer-type",
               "ByteLevelTokenizer", "--split-paragraphs"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("no documents in '" + empty + "', '" + blank + "'"));
  CHECK_FALSE(std::filesystem::exists(prefix + "_text_document.idx"));
}

TEST_CASE("cli train: NullTokenizer's EOD is inside model.vocab_size, as Megatron's (preprocess, then train)",
          "[cli_train]") {
  // Mock data draws ids up to the tokenizer's EOD: with vocab 256 that is 255, inside the model.
  const std::string good = write_file("good_null.yaml", kGood);
  const std::vector<std::string> small = {"model.seq_length=16", "model.hidden_size=32", "training.train_iters=2",
                                          "training.eval_iters=0", "logging.log_interval=1", "training.device=cpu"};
  std::vector<std::string> args = {"train", "--config", good, "data.tokenizer_type=NullTokenizer",
                                   "model.vocab_size=256"};
  args.insert(args.end(), small.begin(), small.end());
  CliResult r = run_cli(args);
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("iteration        2/"));

  // The documented flow: preprocess --vocab-size 1000 --append-eod, then train with model.vocab_size=1000.
  std::string ids;
  for (int d = 0; d < 40; ++d) {
    for (int t = 0; t < 30; ++t) ids += std::to_string((d * 37 + t * 11) % 999) + " ";
    ids += "\n\n";
  }
  const std::string input = write_file("ids.txt", ids);
  const std::string prefix = (temp_dir() / "null" / "ids").string();
  r = run_cli({"preprocess", "--input", input, "--output-prefix", prefix, "--tokenizer-type", "NullTokenizer",
               "--vocab-size", "1000", "--split-paragraphs", "--append-eod"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("40 documents, 1240 tokens"));  // 30 ids + EOD 999 each
  const std::string data_yaml = write_file("null_data.yaml", "optimizer:\n  lr: 1.0e-3\nmodel:\n  num_layers: 2\n"
                                                             "  hidden_size: 32\n  num_attention_heads: 4\n");
  args = {"train", "--config", data_yaml, "data.data_path=[" + prefix + "_text_document]",
          "data.tokenizer_type=NullTokenizer", "model.vocab_size=1000", "data.split=1"};
  args.insert(args.end(), small.begin(), small.end());
  r = run_cli(args);
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("eod 999") || Contains("iteration        2/"));
}

TEST_CASE("cli train: packed sequences with Megatron's reset flags train, and data without EOD is refused",
          "[cli_train][packed]") {
  std::string text;
  for (int d = 0; d < 60; ++d) text += "Document " + std::to_string(d) + " is short.\n\n";
  const std::string input = write_file("packed_docs.txt", text);
  const std::string with_eod = (temp_dir() / "packed" / "with").string(), without = (temp_dir() / "packed" / "without").string();
  for (const auto& [prefix, eod] : {std::pair{with_eod, true}, std::pair{without, false}}) {
    std::vector<std::string> a = {"preprocess", "--input", input, "--output-prefix", prefix, "--tokenizer-type",
                                  "ByteLevelTokenizer", "--split-paragraphs"};
    if (eod) a.push_back("--append-eod");
    const CliResult p = run_cli(a);
    INFO(p.err);
    REQUIRE(p.rc == 0);
  }
  const std::string yaml = write_file("packed.yaml", "optimizer:\n  lr: 1.0e-3\nmodel:\n  num_layers: 2\n"
                                                     "  hidden_size: 32\n  num_attention_heads: 4\n"
                                                     "  position_embedding_type: rope\n");
  const std::vector<std::string> flags = {"--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss",
                                          "model.seq_length=32", "training.train_iters=2", "training.eval_iters=0",
                                          "logging.log_interval=1", "training.device=cpu", "data.split=1"};
  std::vector<std::string> args = {"train", "--config", yaml, "data.data_path=[" + with_eod + "_text_document]"};
  args.insert(args.end(), flags.begin(), flags.end());
  CliResult r = run_cli(args);
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("iteration        2/"));
  args[3] = "data.data_path=[" + without + "_text_document]";
  r = run_cli(args);
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("data.reset_attention_mask") && Contains("--append-eod"));
  CHECK_THAT(r.err, !Contains(".cpp:"));
  // Megatron's --dataloader-inter-document-masking is both resets: the same losses, the same refusal.
  args[3] = "data.data_path=[" + with_eod + "_text_document]";
  const CliResult resets = run_cli(args);
  std::vector<std::string> masking = args;
  masking.erase(std::find(masking.begin(), masking.end(), "--reset-position-ids"));
  *std::find(masking.begin(), masking.end(), "--reset-attention-mask") = "--dataloader-inter-document-masking";
  r = run_cli(masking);
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  REQUIRE(losses(r.out).size() == 2u);
  CHECK(losses(r.out) == losses(resets.out));
  masking[3] = "data.data_path=[" + without + "_text_document]";
  r = run_cli(masking);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("data.dataloader_inter_document_masking") && Contains("--append-eod"));
}

TEST_CASE("cli train: a model vocabulary smaller than the tokenizer's is refused before allocation", "[cli_train]") {
  const std::string good = write_file("good_vocab.yaml", kGood);
  for (const char* extra : {"--validate-only", "training.train_iters=1"}) {
    CliResult r = run_cli({"train", "--config", good, "model.vocab_size=100", extra});
    INFO(extra << "\n" << r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("strata: error: ConfigError: model.vocab_size: 100 is smaller than the tokenizer's "
                               "vocabulary (ByteLevelTokenizer: 257 ids"));
    CHECK_THAT(r.out, !Contains("iteration"));
  }
  CHECK(run_cli({"train", "--config", good, "model.vocab_size=257", "--validate-only"}).rc == 0);
}

TEST_CASE("cli train: --validate-only checks a parallel.world_size other than this launch", "[cli_train]") {
  const std::string good = write_file("good_world.yaml", kGood);
  CliResult r = run_cli({"train", "--config", good, "parallel.world_size=3", "--validate-only"});
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("is valid"));
  r = run_cli({"train", "--config", good, "parallel.world_size=4", "parallel.tensor_model_parallel_size=2",
               "--print-config"});
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Contains("world_size: 4"));
  // A layout that does not divide is still an error naming the field.
  r = run_cli({"train", "--config", good, "parallel.world_size=3", "parallel.tensor_model_parallel_size=2",
               "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("ConfigError: parallel.world_size: 3 is not divisible"));
}

TEST_CASE("cli train: checkpoint paths are checked before any training", "[cli_train]") {
  namespace fs = std::filesystem;
  const std::string good = write_file("good_ckpt.yaml", kGood);
  const std::vector<std::string> run = {"model.seq_length=16", "model.hidden_size=32", "training.train_iters=2",
                                        "training.eval_iters=0", "logging.log_interval=1", "training.device=cpu"};
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--config", good};
    args.insert(args.end(), run.begin(), run.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const fs::path base = temp_dir() / "ckpt_paths";
  fs::remove_all(base);
  fs::create_directories(base);
  const std::string a_file = write_file("ckpt_paths_file.txt", "not a directory");

  // 1. checkpoint.save at an existing file: refused at the start (and by --validate-only), nothing trained.
  for (bool dry : {true, false}) {
    std::vector<std::string> extra = {"checkpoint.save=" + a_file};
    if (dry) extra.push_back("--validate-only");
    CliResult r = train(extra);
    INFO(r.out << r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("strata: error: ConfigError: checkpoint.save: '" + a_file +
                               "' exists and is not a directory"));
    CHECK_THAT(r.out, !Contains("iteration        1/"));
  }
  // A save directory under a file cannot be created.
  CliResult r = train({"checkpoint.save=" + a_file + "/sub"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("ConfigError: checkpoint.save: "));
  CHECK_THAT(r.out, !Contains("iteration        1/"));

  // 2. checkpoint.load: a typo (missing path) is an error, a file is an error, an empty directory warns.
  r = train({"checkpoint.load=" + (base / "no_such_run").string()});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("ConfigError: checkpoint.load: '" + (base / "no_such_run").string() + "' does not exist"));
  r = train({"checkpoint.load=" + (base / "no_such_run").string(), "--validate-only"});
  CHECK(r.rc == 1);
  r = train({"checkpoint.load=" + a_file});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("ConfigError: checkpoint.load: '" + a_file + "' is not a directory"));
  fs::create_directories(base / "empty");
  r = train({"checkpoint.load=" + (base / "empty").string()});
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out + r.err, Contains("training from scratch"));
  // Megatron's --exit-on-missing-checkpoint: the same empty directory (and a job's first run) is an
  // error before training, naming the directory.
  for (const std::string& job_dir : {(base / "empty").string(), (base / "first_run").string()}) {
    r = train({"--exit-on-missing-checkpoint", "--load", job_dir, "--save", job_dir});
    INFO(r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("ConfigError: checkpoint.exit_on_missing_checkpoint: checkpoint.load '" + job_dir +
                               "' holds no checkpoint (no latest_checkpointed_iteration.txt)"));
    CHECK_THAT(r.out, !Contains("iteration        1/"));
  }
  // 3. The first run of a job whose save equals load: the directory does not exist yet.
  const std::string job = (base / "job").string();
  r = train({"checkpoint.save=" + job, "checkpoint.load=" + job});
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK(fs::exists(fs::path(job) / "latest_checkpointed_iteration.txt"));
  fs::remove_all(base);
}

TEST_CASE("cli train: another run's checkpoints are never replaced silently, interrupted saves are cleaned",
          "[cli_train][checkpoint]") {
  namespace fs = std::filesystem;
  const std::string good = write_file("good_owner.yaml", kGood);
  const fs::path base = temp_dir() / "ckpt_owner";
  fs::remove_all(base);
  const std::string dir = (base / "run").string();
  auto train = [&](int64_t iters, std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--config", good, "model.seq_length=16", "model.hidden_size=32",
                                     "training.train_iters=" + std::to_string(iters), "training.eval_iters=0",
                                     "logging.log_interval=1", "training.device=cpu", "checkpoint.save=" + dir,
                                     "checkpoint.save_interval=2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  auto tracker = [&] {
    std::ifstream in(fs::path(dir) / "latest_checkpointed_iteration.txt");
    std::string t;
    in >> t;
    return t;
  };
  // Run A: iterations 2 and 4.
  CliResult r = train(4, {});
  REQUIRE(r.rc == 0);
  REQUIRE(tracker() == "4");
  const auto a_time = fs::last_write_time(fs::path(dir) / "iter_0000002" / "manifest.json");
  // A kill during a save leaves iter_N.tmp; a file the user put there is not Strata's.
  fs::create_directories(fs::path(dir) / "iter_0000005.tmp");
  std::ofstream(fs::path(dir) / "iter_0000005.tmp" / "model_rank_0000.safetensors") << "partial";
  std::ofstream(fs::path(dir) / "notes.txt") << "mine";

  // Run B, fresh, same directory: refused before anything runs, naming what is there.
  for (bool dry : {true, false}) {
    std::vector<std::string> extra;
    if (dry) extra.push_back("--validate-only");
    r = train(2, extra);
    INFO(r.out << r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("ConfigError: checkpoint.save: '" + dir + "' holds another run's checkpoints "
                               "(iterations 2, 4; latest_checkpointed_iteration.txt says 4)"));
    CHECK_THAT(r.err, Contains("--overwrite"));
    CHECK_THAT(r.out, !Contains("iteration        1/"));
  }
  CHECK(tracker() == "4");
  CHECK(fs::last_write_time(fs::path(dir) / "iter_0000002" / "manifest.json") == a_time);
  // A finetune from the directory into itself would replace them too.
  r = train(2, {"checkpoint.load=" + dir, "checkpoint.finetune=true"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("holds another run's checkpoints"));

  // Resuming run A is allowed and removes the interrupted save's leftover at its first save.
  r = train(6, {"checkpoint.load=" + dir, "checkpoint.override_opt_param_scheduler=true"});  // train_iters 4 → 6
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(tracker() == "6");
  CHECK(fs::exists(fs::path(dir) / "iter_0000006" / "manifest.json"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "iter_0000005.tmp"));
  CHECK(fs::exists(fs::path(dir) / "iter_0000004"));

  // --overwrite: run B replaces run A's checkpoints (and only Strata's files).
  r = train(2, {"--overwrite"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(tracker() == "2");
  CHECK(fs::exists(fs::path(dir) / "iter_0000002"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "iter_0000004"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "iter_0000006"));
  CHECK(fs::exists(fs::path(dir) / "notes.txt"));
  // An iteration directory Strata did not write is never replaced, even with --overwrite.
  fs::create_directories(fs::path(dir) / "iter_0000100");
  r = train(2, {"checkpoint.overwrite=true"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("iter_0000100' was not written by Strata"));
  CHECK(fs::exists(fs::path(dir) / "iter_0000100"));
  fs::remove_all(base);
}

TEST_CASE("cli train: a resume into another model is refused naming each field, finetune lists what it skips",
          "[cli_train][checkpoint]") {
  namespace fs = std::filesystem;
  const std::string good = write_file("good_arch.yaml", kGood);
  const fs::path base = temp_dir() / "ckpt_arch";
  fs::remove_all(base);
  const std::string dir = (base / "run").string();
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--config", good, "model.seq_length=16", "model.hidden_size=32",
                                     "training.train_iters=2", "training.eval_iters=0", "logging.log_interval=1",
                                     "training.device=cpu", "model.untie_embeddings_and_output_weights=true"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  REQUIRE(train({"checkpoint.save=" + dir}).rc == 0);
  const std::vector<std::string> resume = {"checkpoint.load=" + dir, "training.train_iters=4"};
  struct Case {
    std::vector<std::string> change;
    std::string names;
  };
  for (const Case& c : std::vector<Case>{
           {{"model.num_layers=1"}, "model.num_layers: the checkpoint has 2, this run 1"},
           {{"model.untie_embeddings_and_output_weights=false"},
            "model.untie_embeddings_and_output_weights: the checkpoint has true, this run false"},
           {{"model.num_attention_heads=2"}, "model.num_attention_heads: the checkpoint has 4, this run 2"},
           {{"model.num_attention_heads=2", "model.num_layers=1"}, "model.num_layers: the checkpoint has 2, this run 1"}}) {
    for (bool dry : {true, false}) {
      std::vector<std::string> extra = resume;
      extra.insert(extra.end(), c.change.begin(), c.change.end());
      if (dry) extra.push_back("--validate-only");
      CliResult r = train(extra);
      INFO(r.out << r.err);
      CHECK(r.rc == 1);
      CHECK_THAT(r.err, Contains("ConfigError: checkpoint.load: '" + dir + "' (iteration 2) holds another model"));
      CHECK_THAT(r.err, Contains(c.names));
      CHECK_THAT(r.err, Contains("checkpoint.finetune=true"));
      CHECK_THAT(r.out, !Contains("iteration        3/"));
    }
  }
  // Another tensor-parallel size pads the vocabulary differently: the field and the value to set.
  {
    const std::string v = (base / "vocab").string();
    REQUIRE(train({"checkpoint.save=" + v, "model.vocab_size=300", "model.make_vocab_size_divisible_by=128"}).rc == 0);
    CliResult r = train({"checkpoint.load=" + v, "model.vocab_size=300", "model.make_vocab_size_divisible_by=128",
                         "parallel.world_size=2", "parallel.tensor_model_parallel_size=2", "--validate-only"});
    INFO(r.out << r.err);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("ConfigError: model.make_vocab_size_divisible_by: the checkpoint in '" + v +
                               "' pads the vocabulary (300) to 384 rows (make_vocab_size_divisible_by 128 × "
                               "tensor_model_parallel_size 1), this run to 512 (128 × 2): set "
                               "model.make_vocab_size_divisible_by=192"));
    r = train({"checkpoint.load=" + v, "model.vocab_size=300", "model.make_vocab_size_divisible_by=192",
               "parallel.world_size=2", "parallel.tensor_model_parallel_size=2", "--validate-only"});
    INFO(r.out << r.err);
    CHECK(r.rc == 0);
  }
  // Finetune into a 1-layer tied model: the differences and every skipped tensor are listed.
  CliResult r = train({"checkpoint.load=" + dir, "checkpoint.finetune=true", "model.num_layers=1",
                       "model.untie_embeddings_and_output_weights=false"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  const std::string log = r.out + r.err;
  CHECK_THAT(log, Contains("checkpoint.finetune: model.num_layers: the checkpoint has 2, this run 1"));
  CHECK_THAT(log, Contains("checkpoint.finetune: the checkpoint's decoder.layers.1.mlp.linear_fc1.weight is not in "
                           "this model; not loaded"));
  CHECK_THAT(log, Contains("checkpoint.finetune: the checkpoint's output_layer.weight is not in this model"));
  // And the other way: a model with more than the checkpoint keeps its initialisation there.
  r = train({"checkpoint.load=" + dir, "checkpoint.finetune=true", "model.num_layers=3"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out + r.err, Contains("checkpoint.finetune: decoder.layers.2.mlp.linear_fc1.weight is not in the "
                                     "checkpoint; it keeps its initialisation"));
  fs::remove_all(base);
}

// Megatron's --pretrained-checkpoint (load_checkpoint): while --load holds no checkpoint the run
// finetunes from the pretrained one (its weights, iteration 0: the same losses as --load P
// --finetune); once the run has saved into --load, the next launch resumes from there.
TEST_CASE("cli train: --pretrained-checkpoint finetunes from it until the run has its own, and --use-checkpoint-args",
          "[cli_train][checkpoint]") {
  namespace fs = std::filesystem;
  const std::string good = write_file("good_pretrained.yaml", kGood);
  const fs::path base = temp_dir() / "ckpt_pretrained";
  fs::remove_all(base);
  const std::string pre = (base / "pre").string(), job = (base / "job").string(), ref = (base / "ref").string();
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--config", good, "model.seq_length=16", "model.hidden_size=32",
                                     "training.train_iters=2", "training.eval_iters=0", "logging.log_interval=1",
                                     "training.device=cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  REQUIRE(train({"--save", pre}).rc == 0);
  CliResult r = train({"--pretrained-checkpoint", pre, "--load", job, "--save", job});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out + r.err, Contains("checkpoint.load " + job + " holds no checkpoint: finetuning from "
                                     "checkpoint.pretrained_checkpoint " + pre));
  CHECK_THAT(r.out, Contains("(finetune: weights only, starting at iteration 0)"));
  CliResult direct = train({"--load", pre, "--finetune", "--save", ref});
  REQUIRE(direct.rc == 0);
  REQUIRE(losses(r.out).size() == 2u);
  CHECK(losses(r.out) == losses(direct.out));
  // The job has its own checkpoint now: it resumes from it (iteration 2 → 4), not from the pretrained.
  // (train_iters 2 → 4: the config's learning-rate schedule, --override-opt_param-scheduler)
  r = train({"--pretrained-checkpoint", pre, "--load", job, "--save", job, "--train-iters", "4",
             "--override-opt_param-scheduler"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("loaded checkpoint from " + job + " at iteration 2"));
  CHECK_THAT(r.out, Contains("iteration        4/"));
  // Megatron's --use-checkpoint-args: the architecture comes from the checkpoint's saved config,
  // over the command line's (num_layers 1 and heads 2 give way to the checkpoint's 2 and 4).
  r = train({"--use-checkpoint-args", "--load", job, "--save", job, "--train-iters", "5", "--num-layers", "1",
             "--num-attention-heads", "2", "--override-opt_param-scheduler"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.err, Contains("strata: checkpoint.use_checkpoint_args: model.num_layers=2 (was 1)"));
  CHECK_THAT(r.err, Contains("strata: checkpoint.use_checkpoint_args: model.num_attention_heads=4 (was 2)"));
  CHECK_THAT(r.out, Contains("loaded checkpoint from " + job + " at iteration 4"));
  // Without it the same command line is another model: refused.
  r = train({"--load", job, "--save", job, "--train-iters", "6", "--num-layers", "1", "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("model.num_layers: the checkpoint has 2, this run 1"));
  // A pretrained directory without a checkpoint is an error naming both, before training.
  fs::create_directories(base / "empty");
  r = train({"--pretrained-checkpoint", (base / "empty").string(), "--save", (base / "other").string()});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("ConfigError: checkpoint.pretrained_checkpoint: '" + (base / "empty").string() +
                             "' holds no checkpoint (no latest_checkpointed_iteration.txt), and checkpoint.load "
                             "is null"));
  fs::remove_all(base);
}

// Megatron's --save-retain-interval: after each save the previous checkpoint goes unless its
// iteration is a multiple of the interval (saves at 2, 4, …, 10 with 4: 4, 8 and the last, 10, stay).
TEST_CASE("cli train: --save-retain-interval keeps the multiples and the latest checkpoint", "[cli_train][checkpoint]") {
  namespace fs = std::filesystem;
  const std::string good = write_file("good_retain.yaml", kGood);
  const fs::path dir = temp_dir() / "ckpt_retain";
  fs::remove_all(dir);
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--config", good, "model.seq_length=16", "model.hidden_size=32",
                                     "training.eval_iters=0", "logging.log_interval=1", "training.device=cpu",
                                     "--save", dir.string(), "--save-interval", "2", "--train-iters", "10"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  CliResult r = train({"--save-retain-interval", "4"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"iter_0000004", "iter_0000008", "iter_0000010"});
  CHECK_THAT(r.out + r.err, Contains("checkpoint.save_retain_interval: removed " + (dir / "iter_0000006").string()));
  r = train({"--save-retain-interval", "3", "--validate-only"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("ConfigError: checkpoint.save_retain_interval: 3 is not a multiple of "
                             "checkpoint.save_interval (2)"));
  fs::remove_all(dir);
}

TEST_CASE("cli train: a model this machine cannot hold is refused before allocation, with both numbers",
          "[cli_train]") {
  const std::string good = write_file("good_big.yaml", kGood);
  CliResult r = run_cli({"train", "--config", good, "model.hidden_size=65536", "model.num_attention_heads=64",
                         "model.num_layers=64", "training.device=cpu"});
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ") && Contains("this model needs about "));
  CHECK_THAT(r.err, Contains(" GiB per rank, more than the "));
  CHECK_THAT(r.err, Contains(" GiB of this host's memory"));
  CHECK_THAT(r.out, !Contains("iteration        1/"));
  // The rule itself: ranks on one host share its memory.
  CHECK_NOTHROW(check_rank_memory(int64_t{3} << 30, 2, int64_t{6} << 30, "this host's memory"));
  CHECK_THROWS_WITH(check_rank_memory(int64_t{3} << 30, 3, int64_t{8} << 30, "this host's memory"),
                    Contains("needs about 3.00 GiB per rank (3 ranks share this host's memory), more than the 8.00 GiB"));
}

TEST_CASE("cli: an unknown command is named, with the list of commands", "[cli_train]") {
  // CLI11 alone said "A subcommand is required".
  CliResult r = run_cli({"foo"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: 'foo' is not a strata command; the commands are bench, export, "
                             "generate, golden, import, plan, preprocess, train"));
  CHECK_THAT(r.err, !Contains("A subcommand is required"));
  CHECK(r.out.empty());
  r = run_cli({"trian", "--config", "x.yaml"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("'trian' is not a strata command"));
  // A known command and --help still parse as before.
  CHECK(run_cli({"--help"}).rc == 0);
  CHECK(run_cli({"train", "--help-config"}).rc == 0);
}

TEST_CASE("cli: an exception from the standard library reaches the user as strata: error", "[cli_train]") {
  // create_directories under a regular file throws std::filesystem::filesystem_error.
  const std::string input = write_file("fs_corpus.txt", "some text\n");
  const std::string a_file = write_file("fs_blocker", "x");
  CliResult r = run_cli({"preprocess", "--input", input, "--output-prefix", a_file + "/sub/out", "--tokenizer-type",
                         "ByteLevelTokenizer"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: "));
}
