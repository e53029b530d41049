// Tests of generation (training/inference/generation.h) and `strata generate`: top-k / top-p filtering on
// hand cases, greedy KV-cached generation against argmax of full forwards, seeded sampling
// reproducibility, --score log-probabilities against a hand computation, and the CLI end to end
// (train 3 steps with mock data, then generate / score from the checkpoint; bad arguments).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/strata/cli.h"
#include "core/philox.h"
#include "models/gpt/gpt_model.h"
#include "cli_test_helpers.h"
#include "test_helpers.h"
#include "data/tokenizer.h"
#include "training/config/model_factory.h"
#include "training/inference/generation.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::test::CliResult;
using strata::test::run_cli;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

ModelConfig tiny_config() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.vocab_size = 50;
  m.make_vocab_size_divisible_by = 16;  // padded to 64
  m.seq_length = 32;
  m.normalization = Normalization::LayerNorm;
  m.position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.init_method_std = 0.5;  // peaked logits so greedy choices are well separated
  return m;
}

std::unique_ptr<GPTModel> tiny_model(uint64_t seed = 3) {
  GPTModelOptions o;
  o.dtype = DType::F32;
  o.seed = 77;
  auto m = std::make_unique<GPTModel>(tiny_config(), o);
  m->init_parameters(seed);
  return m;
}

std::vector<double> row_of(const Tensor& logits, int64_t pos) {
  return logits.narrow(1, pos, 1).contiguous().to_vector();
}

int64_t argmax(const std::vector<double>& v) {
  return static_cast<int64_t>(std::max_element(v.begin(), v.end()) - v.begin());
}


}  // namespace

TEST_CASE("generation: top-k filtering on hand cases", "[generation]") {
  std::vector<double> l = {1.0, 5.0, 3.0, 4.0, 2.0};
  generation::apply_top_k(l, 2);
  CHECK(l == std::vector<double>{-kInf, 5.0, -kInf, 4.0, -kInf});
  l = {1.0, 5.0, 3.0, 3.0, 2.0};  // ties at the k-th value are kept
  generation::apply_top_k(l, 2);
  CHECK(l == std::vector<double>{-kInf, 5.0, 3.0, 3.0, -kInf});
  l = {1.0, 2.0, 3.0};
  generation::apply_top_k(l, 0);  // off
  CHECK(l == std::vector<double>{1.0, 2.0, 3.0});
  generation::apply_top_k(l, 3);  // k == size: unchanged
  CHECK(l == std::vector<double>{1.0, 2.0, 3.0});
  generation::apply_top_k(l, 1);
  CHECK(l == std::vector<double>{-kInf, -kInf, 3.0});
}

TEST_CASE("generation: top-p filtering on hand cases", "[generation]") {
  // probabilities 0.5, 0.3, 0.15, 0.05 (logits = log p)
  const std::vector<double> base = {std::log(0.15), std::log(0.5), std::log(0.05), std::log(0.3)};
  auto kept = [&](double p) {
    std::vector<double> l = base;
    generation::apply_top_p(l, p);
    std::vector<int> k;
    for (size_t i = 0; i < l.size(); ++i)
      if (l[i] != -kInf) k.push_back(static_cast<int>(i));
    return k;
  };
  CHECK(kept(0.4) == std::vector<int>{1});           // 0.5 alone crosses 0.4
  CHECK(kept(0.5) == std::vector<int>{1});           // reaches 0.5 exactly: the rest go
  CHECK(kept(0.6) == std::vector<int>{1, 3});        // 0.5 + 0.3
  CHECK(kept(0.9) == std::vector<int>{0, 1, 3});     // 0.5 + 0.3 + 0.15
  CHECK(kept(0.99) == std::vector<int>{0, 1, 2, 3});
  CHECK(kept(0.0) == std::vector<int>{0, 1, 2, 3});  // off
  CHECK(kept(0.01) == std::vector<int>{1});          // the most likely token always stays

  // The full pipeline: temperature, then top-k, then top-p, renormalized.
  generation::SamplingOptions so;
  so.temperature = 1.0;
  so.top_k = 3;
  so.top_p = 0.6;
  std::vector<double> p = generation::sampling_probabilities(base, so);
  CHECK(p[0] == 0.0);
  CHECK(p[2] == 0.0);
  CHECK(p[1] == Approx(0.5 / 0.8).margin(1e-12));
  CHECK(p[3] == Approx(0.3 / 0.8).margin(1e-12));
  so.top_k = 0;
  so.top_p = 0.0;
  so.temperature = 0.5;  // p ∝ p0^2
  p = generation::sampling_probabilities(base, so);
  const double z = 0.15 * 0.15 + 0.25 + 0.0025 + 0.09;
  CHECK(p[1] == Approx(0.25 / z).margin(1e-12));
  CHECK(p[2] == Approx(0.0025 / z).margin(1e-12));
  // Greedy ignores the RNG.
  so.temperature = 0.0;
  CHECK(generation::sample_token(base, so, 0) == 1);
  CHECK(generation::sample_token(base, so, 7) == 1);
}

TEST_CASE("generation: greedy KV-cached generation equals argmax of full forwards", "[generation]") {
  auto model = tiny_model();
  const std::vector<int64_t> prompt = {1, 2, 3, 4};
  generation::GenerateOptions go;
  go.max_new_tokens = 10;
  go.sampling.temperature = 0.0;
  const std::vector<int64_t> got = generation::generate(*model, prompt, go);
  REQUIRE(got.size() == 10);
  std::vector<int64_t> seq = prompt;
  for (int64_t step = 0; step < 10; ++step) {
    Tensor logits = model->logits_for(Tensor::from_data(seq, Shape{1, static_cast<int64_t>(seq.size())}), nullptr, 0);
    const int64_t want = argmax(row_of(logits, static_cast<int64_t>(seq.size()) - 1));
    INFO("step " << step);
    CHECK(got[static_cast<size_t>(step)] == want);
    seq.push_back(want);
  }
  // EOD stops generation (and is included); the model's positions clip max_new_tokens.
  go.eod = got[2];
  const std::vector<int64_t> stopped = generation::generate(*model, prompt, go);
  CHECK(stopped.size() <= 3);
  CHECK(stopped.back() == got[2]);
  go.eod.reset();
  go.max_new_tokens = 1000;
  CHECK(generation::generate(*model, prompt, go).size() == 32 - prompt.size());
  CHECK_THROWS_WITH(generation::generate(*model, {}, go), Contains("prompt is empty"));
  CHECK_THROWS_WITH(generation::generate(*model, {1, 99}, go), Contains("outside the vocabulary"));
}

TEST_CASE("generation: the same seed gives the same tokens, another seed others", "[generation]") {
  auto model = tiny_model();
  model->init_parameters(4);
  generation::GenerateOptions go;
  go.max_new_tokens = 20;
  go.sampling.temperature = 1.0;
  go.sampling.seed = 11;
  const auto a = generation::generate(*model, {5, 6}, go);
  const auto b = generation::generate(*model, {5, 6}, go);
  go.sampling.seed = 12;
  const auto c = generation::generate(*model, {5, 6}, go);
  REQUIRE(a.size() == 20);
  CHECK(a == b);
  CHECK(a != c);
  // Sampling follows philox: step i uses uniform(seed, "generate", i) on the filtered distribution.
  std::vector<double> l = {0.0, 1.0, 2.0, 3.0};
  generation::SamplingOptions so;
  so.seed = 5;
  for (int64_t step = 0; step < 8; ++step) {
    const std::vector<double> p = generation::sampling_probabilities(l, so);
    const double u = philox::uniform(philox::Key{5, philox::stream_id("generate")}, static_cast<uint64_t>(step));
    int64_t want = 0;
    double cum = p[0];
    while (u >= cum) cum += p[static_cast<size_t>(++want)];
    CHECK(generation::sample_token(l, so, step) == want);
  }
}

TEST_CASE("generation: score log-probs equal a hand computation from full-forward logits", "[generation]") {
  auto model = tiny_model();
  const std::vector<int64_t> prompt = {7, 3, 9, 9, 0, 42};
  const generation::ScoreResult r = generation::score(*model, prompt);
  REQUIRE(r.logprobs.size() == prompt.size());
  CHECK_FALSE(r.logprobs[0].has_value());
  Tensor logits = model->logits_for(Tensor::from_data(prompt, Shape{1, 6}), nullptr, 0);
  double sum = 0;
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::vector<double> row = row_of(logits, static_cast<int64_t>(i) - 1);
    double m = -kInf, s = 0;
    for (double x : row) m = std::max(m, x);
    for (double x : row) s += std::exp(x - m);
    const double want = row[static_cast<size_t>(prompt[i])] - m - std::log(s);
    REQUIRE(r.logprobs[i].has_value());
    CHECK(*r.logprobs[i] == Approx(want).margin(1e-9));
    sum += want;
  }
  CHECK(r.sum_logprob == Approx(sum).margin(1e-9));
  REQUIRE(r.perplexity.has_value());
  CHECK(*r.perplexity == Approx(std::exp(-sum / 5)).epsilon(1e-9));
  const auto j = nlohmann::json::parse(r.to_json());
  CHECK(j["tokens"].size() == 6);
  CHECK(j["logprobs"][0].is_null());
  CHECK(j["logprobs"][1].get<double>() == Approx(*r.logprobs[1]));
  CHECK(j["sum_logprob"].get<double>() == Approx(sum).margin(1e-9));
  // A one-token prompt has nothing to score.
  const generation::ScoreResult one = generation::score(*model, {4});
  CHECK(one.sum_logprob == 0.0);
  CHECK_FALSE(one.perplexity.has_value());
}

TEST_CASE("cli generate: train 3 steps with mock data, then generate and score", "[generation]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata_test_generate_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cfg_path = (dir / "tiny.yaml").string();
  std::ofstream(cfg_path) << "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n"
                             "  hidden_size: 32\n  num_attention_heads: 4\n  seq_length: 32\n"
                             "training:\n  micro_batch_size: 2\n  global_batch_size: 2\n  device: cpu\n"
                             "inference:\n  max_new_tokens: 4\n  temperature: 0.8\n  top_k: 10\n";
  const std::string ckpt = (dir / "ckpt").string();
  CliResult r = run_cli({"train", "--config", cfg_path, "training.train_iters=3", "training.eval_interval=3",
                         "training.eval_iters=1", "logging.log_interval=1", "checkpoint.save=" + ckpt});
  INFO(r.err);
  REQUIRE(r.rc == 0);

  r = run_cli({"generate", "--load", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "5"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.out.size() >= 4);  // bytes 1, 2, 3 and at least the newline
  CHECK(r.out.substr(0, 3) == std::string("\x01\x02\x03"));
  // Reproducible with the same seed.
  CliResult r2 = run_cli({"generate", "--load", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "5"});
  CHECK(r2.out == r.out);
  r = run_cli({"generate", "--load", ckpt, "--prompt", "Hello", "--temperature", "0", "--top-p", "0.9", "--seed",
               "3", "--config-override", "inference.max_new_tokens=3"});
  REQUIRE(r.rc == 0);
  CHECK(r.out.rfind("Hello", 0) == 0);

  r = run_cli({"generate", "--load", ckpt, "--prompt", "abc", "--score"});
  REQUIRE(r.rc == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["tokens"] == nlohmann::json::array({97, 98, 99}));
  CHECK(j["logprobs"][0].is_null());
  CHECK(j["logprobs"][2].get<double>() < 0.0);
  CHECK(j["perplexity"].get<double>() > 1.0);

  // Bad arguments.
  r = run_cli({"generate", "--load", (dir / "nothing").string(), "--prompt-ids", "1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("is not a directory"));
  r = run_cli({"generate", "--load", dir.string(), "--prompt-ids", "1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("no checkpoint under"));
  r = run_cli({"generate", "--load", ckpt, "--prompt", "x", "--prompt-ids", "1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("exactly one of --prompt TEXT and --prompt-ids"));
  r = run_cli({"generate", "--load", ckpt});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("exactly one of"));
  r = run_cli({"generate", "--load", ckpt, "--prompt-ids", "1,x"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("comma-separated list"));
  r = run_cli({"generate", "--load", ckpt, "--prompt-ids", "1,999"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("outside the vocabulary"));
  r = run_cli({"generate", "--prompt-ids", "1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("exactly one of --load DIR (a checkpoint) and --config FILE (untrained)"));
  r = run_cli({"generate", "--load", ckpt, "--config", cfg_path, "--prompt-ids", "1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("exactly one of --load DIR"));
  r = run_cli({"generate", "--config", cfg_path, "--iteration", "3", "--prompt-ids", "1"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("--iteration needs --load"));

  // --config: the untrained model, initialized as `strata train` initializes it (training.seed).
  r = run_cli({"generate", "--config", cfg_path, "--prompt-ids", "1,2,3", "--temperature", "0", "--max-new-tokens",
               "6"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  StrataConfig c = StrataConfig::load(cfg_path);
  const std::unique_ptr<data::Tokenizer> tok = data::build_tokenizer(c.data, c.model.vocab_size);
  c.model.vocab_size = tok->vocab_size();
  const ResolvedConfig rc = c.validate(1);
  std::unique_ptr<LanguageModel> untrained = make_model(rc, Device::cpu());
  untrained->init_parameters(static_cast<uint64_t>(rc.training->seed));
  generation::GenerateOptions go;
  go.max_new_tokens = 6;
  go.sampling.temperature = 0.0;
  go.eod = tok->eod();
  std::vector<int64_t> all = {1, 2, 3};
  for (int64_t t : generation::generate(*untrained, {1, 2, 3}, go)) all.push_back(t);
  CHECK(r.out == tok->decode(all) + "\n");

  // The sampling flags follow the inference section's rules.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--top-p", "2"}, "--top-p must be in [0, 1]"},
      {{"--top-p", "-0.1"}, "--top-p must be in [0, 1]"},
      {{"--top-k", "-5"}, "--top-k must be >= 0"},
      {{"--temperature", "-1"}, "--temperature must be >= 0"},
      {{"--top-k", "5", "--top-p", "0.5"}, "--top-k and --top-p cannot be combined"},
      {{"--max-new-tokens", "0"}, "--max-new-tokens must be > 0"},
      {{"--seed", "-3"}, "--seed must be >= 0"},
  };
  for (const auto& [flags, msg] : bad) {
    std::vector<std::string> args = {"generate", "--load", ckpt, "--prompt-ids", "1,2"};
    args.insert(args.end(), flags.begin(), flags.end());
    r = run_cli(args);
    INFO(flags[0] << " " << flags[1]);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Contains("strata: error: ") && Contains(msg));
  }
  // More new tokens than the 32 positions leave: said on stderr, the output stops at the limit.
  r = run_cli({"generate", "--load", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "100", "--temperature", "0"});
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.err, Contains("100 new tokens asked for, but the model has 32 positions") &&
                        Contains("generating at most 29"));
  r = run_cli({"generate", "--load", ckpt, "--prompt-ids", "1,2,3", "--max-new-tokens", "5"});
  CHECK(r.err.find("positions") == std::string::npos);
  // --iteration: an iteration that exists, and one that does not.
  r = run_cli({"generate", "--load", ckpt, "--iteration", "3", "--prompt", "abc", "--score"});
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK(nlohmann::json::parse(r.out) == j);
  r = run_cli({"generate", "--load", ckpt, "--iteration", "2", "--prompt", "abc", "--score"});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("no checkpoint at iteration 2") && Contains("iter_0000002"));
  fs::remove_all(dir);
}
