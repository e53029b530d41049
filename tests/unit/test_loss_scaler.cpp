// fp16 training (training.precision fp16): Megatron's DynamicGradScaler on a hand-worked sequence
// of overflows, the constant scaler, the config rules, and training runs whose logged loss scale,
// skipped iterations and learning rate follow the scaler's rule step by step (the scheduler does
// not advance on a skipped step); a GPT in fp16 against the same GPT in fp32.
#include <catch2/catch.hpp>

#include <sstream>

#include "tests/unit/trainer_test_support.h"
#include "training/config/model_factory.h"
#include "training/observability/metrics_log.h"
#include "training/optimizer/loss_scaler.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;

// initial 16, min 2, window 3, hysteresis 2. Overflow pattern I I I I . . . . . . I . I I:
//  I: tracker 1, scale 16 | I: tracker 0 → 8 | I: tracker -1 → 4 | I: → 2 | I... (min 2)
//  then 3 clean steps → 4 (tracker reset to 2), 3 more → 8; I: tracker 1, 8; clean: growth 1;
//  I: tracker 0 → 4; I: tracker -1 → 2.
TEST_CASE("loss scaler: Megatron's dynamic rule, worked by hand", "[loss_scaler]") {
  LossScaler s = LossScaler::dynamic(16, 2, 3, 2);
  const bool overflow[] = {true, true, true, true, false, false, false, false, false, false, true, false, true, true};
  const double expected[] = {16, 8, 4, 2, 2, 2, 4, 4, 4, 8, 8, 8, 4, 2};
  for (size_t i = 0; i < std::size(overflow); ++i) {
    s.update(overflow[i]);
    INFO("update " << i + 1);
    CHECK(s.scale() == expected[i]);
  }
  CHECK(s.state().growth_tracker == 0);
  CHECK(s.state().hysteresis_tracker == -1);
  LossScaler c = LossScaler::constant(1024);
  c.update(true);
  CHECK(c.scale() == 1024);
  CHECK_FALSE(c.is_dynamic());
}

TEST_CASE("loss scaler: fp16 config and Megatron's flags", "[loss_scaler][config]") {
  auto config = [](const std::vector<std::string>& flags) {
    return config_from_flags("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", flags);
  };
  const ResolvedConfig d = config({"--fp16"});
  CHECK(d.training->precision == Precision::Fp16);
  const LossScaler dyn = *LossScaler::from_config(*d.training);
  CHECK(dyn.is_dynamic());
  CHECK(dyn.scale() == 4294967296.0);  // Megatron's --initial-loss-scale default, 2^32
  const ResolvedConfig c = config({"--fp16", "--loss-scale", "4096"});
  CHECK_FALSE(LossScaler::from_config(*c.training)->is_dynamic());
  CHECK(config({"--fp16", "--initial-loss-scale", "65536", "--min-loss-scale", "4", "--loss-scale-window", "10",
                "--hysteresis", "3"})
            .training->hysteresis == 3);
  CHECK_FALSE(LossScaler::from_config(*config({"--bf16"}).training).has_value());
  auto error_with = [&](const std::vector<std::string>& flags) { return error_of([&] { config(flags); }); };
  CHECK(error_with({"--bf16", "--loss-scale", "8"}).find("training.loss_scale: applies to fp16") != std::string::npos);
  CHECK(error_with({"--fp16", "--loss-scale", "8", "--hysteresis", "3"}).find("constant scale") != std::string::npos);
  CHECK(error_with({"--fp16", "--initial-loss-scale", "2", "--min-loss-scale", "4"}).find("training.min_loss_scale") !=
        std::string::npos);
  CHECK(error_with({"--fp16", "--exit-on-nan"}).find("training.exit_on_nan") != std::string::npos);
  CHECK(error_with({"--apply-query-key-layer-scaling"}).find("query-key layer scaling") != std::string::npos);
}

namespace {
const int64_t kVocab = 11;
}  // namespace

// A bigram model with fp16 parameters: the loss gradient is scaled by the loss scale and the fp16
// main grads overflow to Inf while the scale is large. Every step's logged loss scale, skip and
// learning rate must follow Megatron's rule from the skips the run reports.
TEST_CASE("loss scaler: an fp16 run follows the dynamic rule, and skipped steps leave the lr", "[loss_scaler][trainer]") {
  const ResolvedConfig cfg = tiny_config({"training.precision=fp16", "training.initial_loss_scale=1048576",
                                          "training.loss_scale_window=4", "training.hysteresis=2",
                                          "logging.log_interval=1", "training.train_iters=20"});
  BigramModel model(kVocab, DType::F16);
  MockBatchSource train(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed));
  std::ostringstream log;
  MemoryMetricsSink sink;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.sinks = {&sink};
  Trainer trainer(cfg, model, train, nullptr, opt);
  const TrainResult r = trainer.train();
  REQUIRE(sink.records.size() == 20);
  LossScaler expected = LossScaler::dynamic(1048576, 1, 4, 2);
  const LrSchedule lr(*cfg.optimizer, *cfg.training);
  int64_t skipped = 0, successful_samples = 0;
  for (size_t i = 0; i < 20; ++i) {
    const nlohmann::json& rec = sink.records[i];
    const bool skip = rec["skipped-iterations"] == 1;
    INFO("iteration " << i + 1 << ", skipped " << skip);
    expected.update(skip);
    CHECK(rec["loss-scale"].get<double>() == expected.scale());
    CHECK(rec["nan-iterations"] == 0);
    if (!skip) successful_samples += 6;
    skipped += skip ? 1 : 0;
    CHECK(rec["learning-rate"].get<double>() == lr.lr(successful_samples));
  }
  CHECK(skipped >= 2);       // 2^20 overflows fp16 at first
  CHECK(skipped <= 15);      // and the scale comes down to where it does not
  CHECK(r.skipped_iterations == skipped);
  CHECK(log.str().find("loss scale: ") != std::string::npos);
}

// The same GPT in fp16 (constant loss scale) and fp32 from the same seed: f16's 11-bit mantissa
// keeps the first steps' losses within 2e-3 of fp32.
TEST_CASE("loss scaler: a GPT trains in fp16 close to fp32", "[loss_scaler][trainer]") {
  auto run = [](const std::string& precision, const std::vector<std::string>& extra) {
    std::vector<std::string> o = {"model.num_layers=2",          "model.hidden_size=32",
                                  "model.num_attention_heads=4", "model.vocab_size=64",
                                  "model.seq_length=16",         "model.max_position_embeddings=16",
                                  "model.hidden_dropout=0",      "model.attention_dropout=0",
                                  "training.micro_batch_size=2", "training.global_batch_size=4",
                                  "training.train_iters=5",      "logging.log_interval=100",
                                  "training.precision=" + precision};
    o.insert(o.end(), extra.begin(), extra.end());
    const StrataConfig cfg =
        StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", o, "gpt.yaml");
    const ResolvedConfig v = cfg.validate(1);
    std::vector<std::unique_ptr<LanguageModel>> chunks =
        make_model_chunks(v, Device::cpu(), ParallelGroups::single_process());
    MockBatchSource data(64, 16, 2, 2, static_cast<uint64_t>(v.training->seed));
    std::ostringstream log;
    TrainerOptions opt;
    opt.log_stream = &log;
    Trainer trainer(v, *chunks.front(), data, nullptr, opt);
    return trainer.train();
  };
  const TrainResult f32 = run("fp32", {});
  const TrainResult f16 = run("fp16", {"training.loss_scale=1024"});
  REQUIRE(f16.losses.size() == 5);
  CHECK(f16.skipped_iterations == 0);
  for (size_t i = 0; i < 5; ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(f16.losses[i] - f32.losses[i]) <= 2e-3 * f32.losses[i]);
    CHECK(f16.losses[i] != f32.losses[i]);  // fp16 really rounds
  }
}
