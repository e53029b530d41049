// Variable global batch sizes (training/config/batch_size_schedule.h) against hand-computed cases:
// Megatron's --step-batch-size-schedule string (the gpt3 175b example's, thresholds in tokens), the
// step schedule's and the legacy ramp-up's sizes and update_train_iters counts, Megatron's config
// rules, and a training run whose every step's batch size, consumed samples and learning rate are
// worked by hand, with a checkpoint at each micro-batch change and a bit-exact resume across one.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <sstream>

#include "tests/unit/trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/config/batch_size_schedule.h"
#include "training/observability/metrics_log.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

// examples/gpt3/train_gpt3_175b_distributed.sh at --seq-length 2048: 2.4B tokens / 2048 = 1171875
// samples, and so on (Megatron's int(float(v) × 1e9) // seq_length).
TEST_CASE("batch size schedule: Megatron's schedule string, thresholds in tokens", "[batch_size]") {
  const auto s = parse_step_batch_size_schedule("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048, "f");
  const BatchSizeSchedule::Steps expected = {{0, 16},          {1171875, 320}, {2343750, 624},
                                             {3515625, 928}, {4687500, 1232}, {5859375, 1536}};
  CHECK(s == expected);
  // Commas, lower-case suffixes, unsorted entries, K on a size.
  const BatchSizeSchedule::Steps sorted = {{0, 8}, {250, 2000}, {500, 16}};
  CHECK(parse_step_batch_size_schedule("1k:16, 0:8,500:2K", 2, "f") == sorted);
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"0:16 100", "expected THRESHOLD:BATCH_SIZE"},
           {"10:16 100:32", "first entry must have threshold 0"},
           {"0:16 3:32", "strictly increasing"},  // at seq_length 4: 3 tokens are sample 0 again
           {"0:16 x:32", "is not a number"},
           {"0:0", "must be positive"},
           {"", "no THRESHOLD:BATCH_SIZE"}}) {
    INFO(text);
    const std::string e = error_of([&] { parse_step_batch_size_schedule(text, text == "0:16 3:32" ? 4 : 2, "f"); });
    CHECK(e.find(message) != std::string::npos);
    CHECK(e.find("f: ") != std::string::npos);  // names the field
  }
}

// Step schedule 0:4, 20 samples:8, 50 samples:12 — consumed 0 4 8 12 16 | 20 28 36 44 | 52 64 76:
// train_samples 70 takes 11 steps (the last one passes 70, as Megatron's update_train_iters).
TEST_CASE("batch size schedule: step sizes and Megatron's update_train_iters", "[batch_size]") {
  const BatchSizeSchedule s = BatchSizeSchedule::steps({{0, 4}, {20, 8}, {50, 12}});
  CHECK(s.global_batch_size(0) == 4);
  CHECK(s.global_batch_size(19) == 4);
  CHECK(s.global_batch_size(20) == 8);
  CHECK(s.global_batch_size(52) == 12);
  CHECK(s.iterations_for_samples(70) == 11);
  CHECK(s.iterations_for_samples(76) == 11);
  CHECK(s.iterations_for_samples(77) == 12);
  CHECK(s.samples_for_iterations(5) == 20);
  CHECK(s.samples_for_iterations(9) == 52);
  CHECK(s.samples_for_iterations(11) == 76);
  CHECK(s.samples_for_iterations(12) == 88);
  CHECK(s.sizes() == std::vector<int64_t>{4, 8, 12});
  CHECK(BatchSizeSchedule::constant(6).iterations_for_samples(20) == 3);
}

// Ramp-up 4 → 16 by 4 over 30 samples (Megatron before 532ad926b4): 3 increments of 10 samples;
// size 4 + int(consumed / 10) · 4 while consumed <= 30, then 16. Consumed 0 4 8 12 20 32 48 …
// update_train_iters(100): 5 ramp steps reach 32, then (100 − 32) // 16 = 4 whole batches.
TEST_CASE("batch size schedule: the legacy ramp-up", "[batch_size]") {
  const BatchSizeSchedule s = BatchSizeSchedule::rampup(4, 4, 30, 16);
  CHECK(s.global_batch_size(0) == 4);
  CHECK(s.global_batch_size(8) == 4);
  CHECK(s.global_batch_size(12) == 8);
  CHECK(s.global_batch_size(20) == 12);
  CHECK(s.global_batch_size(30) == 16);
  CHECK(s.global_batch_size(32) == 16);
  CHECK(s.iterations_for_samples(100) == 9);
  CHECK(s.samples_for_iterations(5) == 32);
  CHECK(s.samples_for_iterations(9) == 96);
  CHECK(s.sizes() == std::vector<int64_t>{4, 8, 12, 16});
}

TEST_CASE("batch size schedule: Megatron's flags and rules", "[batch_size][config]") {
  auto config = [](const std::vector<std::string>& flags, int64_t world = 1) {
    return config_from_flags(
        "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  seq_length: 8\n  max_position_embeddings: 8\n",
        flags, world);
  };
  // Thresholds 0, 32 and 96 tokens: samples 0, 4, 12; train_samples 30 → consumed 2 4 8 12 18 24 30.
  const ResolvedConfig c = config({"--step-batch-size-schedule", "0:2 32:4 96:6", "--train-samples", "30",
                                   "--micro-batch-size", "2"});
  CHECK(c.training->train_iters == 7);
  CHECK(c.training->global_batch_size == 2);  // Megatron: micro_batch_size × dp when not given
  CHECK(c.batch_size_schedule().samples_for_iterations(7) == 30);
  const ResolvedConfig r = config({"--rampup-batch-size", "4", "4", "30", "--global-batch-size", "16",
                                   "--train-samples", "100"});
  CHECK(r.training->rampup_batch_size == std::vector<int64_t>{4, 4, 30});
  CHECK(r.training->train_iters == 9);
  for (const auto& [flags, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--step-batch-size-schedule", "0:8", "--global-batch-size", "8"}, "Cannot specify both"},
           {{"--rampup-batch-size", "4", "4", "30", "--global-batch-size", "16"}, "needs sample-based training"},
           {{"--rampup-batch-size", "4", "5", "30", "--global-batch-size", "16", "--train-samples", "100"},
            "multiple of the increment"},
           {{"--rampup-batch-size", "4", "4", "--global-batch-size", "16", "--train-samples", "100"}, "three numbers"},
           {{"--rampup-batch-size", "4", "4", "30", "--step-batch-size-schedule", "0:8", "--train-samples", "100"},
            "choose one"},
           {{"--step-batch-size-schedule", "0:4 32:6", "--micro-batch-size", "4"},
            "training.step_batch_size_schedule: 6 (a global batch size of the schedule) is not divisible"}}) {
    const std::string e = error_of([&] { config(flags); });
    INFO(flags.front() << " → " << e);
    CHECK(e.find(message) != std::string::npos);
  }
  // The interleaved schedule needs every size's micro-batches in groups of pp.
  const std::string vpp = error_of([&] {
    config({"--step-batch-size-schedule", "0:2 32:3", "--pipeline-model-parallel-size", "2",
            "--virtual-pipeline-model-parallel-size", "2", "--num-layers", "4"},
           2);
  });
  CHECK(vpp.find("parallel.virtual_pipeline_model_parallel_size") != std::string::npos);
  CHECK(vpp.find("of the global batch size 3") != std::string::npos);
}

namespace {
const int64_t kVocab = 11;

struct ScheduleRun {
  TrainResult result;
  MemoryMetricsSink sink;
  std::string log;
};

// tiny_config (micro-batch 2, seq 8) over 30 samples, lr 5e-2 → 1e-4 cosine with 6 warmup samples,
// by default with the step schedule 0:2, 4 samples:4, 12 samples:6.
void run_schedule(ScheduleRun& r, const std::vector<std::string>& extra,
                  const std::vector<std::string>& batch_sizes = {"training.global_batch_size=null",
                                                                 "training.step_batch_size_schedule=0:2 32:4 96:6"}) {
  std::vector<std::string> o = {"training.train_iters=null",     "training.train_samples=30",
                                "optimizer.lr_warmup_iters=0",   "optimizer.lr_decay_iters=null",
                                "optimizer.lr_warmup_samples=6", "logging.log_interval=1"};
  o.insert(o.end(), batch_sizes.begin(), batch_sizes.end());
  o.insert(o.end(), extra.begin(), extra.end());
  const ResolvedConfig cfg = tiny_config(o);
  BigramModel model(kVocab);
  MockBatchSource train(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed));
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.tensor_io = std::make_shared<TestSafetensorsIO>();
  opt.sinks = {&r.sink};
  Trainer trainer(cfg, model, train, nullptr, opt);
  r.result = trainer.train();
  r.log = log.str();
}
}  // namespace

namespace {
// Megatron's lr after n samples for run_schedule's schedule: warmup 5e-2 · n / 6 up to 6 samples,
// then 1e-4 + (5e-2 − 1e-4) · ½(cos(π (n − 6) / 24) + 1). The lr logged after a step is the lr of
// the samples consumed so far.
double hand_lr(double n) {
  if (n <= 6) return 5e-2 * n / 6.0;
  return 1e-4 + (5e-2 - 1e-4) * 0.5 * (std::cos(std::numbers::pi * (n - 6.0) / 24.0) + 1.0);
}

void check_steps(const ScheduleRun& run, const std::vector<int64_t>& sizes, const std::vector<int64_t>& consumed) {
  REQUIRE(run.sink.records.size() == sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    const nlohmann::json& rec = run.sink.records[k];
    INFO("iteration " << k + 1);
    CHECK(rec["batch-size"] == sizes[k]);
    CHECK(rec["consumed_samples"] == consumed[k]);
    CHECK(rec["learning-rate"].get<double>() == Approx(hand_lr(static_cast<double>(consumed[k]))).epsilon(1e-14));
  }
}
}  // namespace

// Ramp-up 2 → 6 by 2 over 8 samples (4 samples per size; 2 + int(c / 4) · 2 while c <= 8, then 6):
// consumed 0 2 4 8 14, then (30 − 14) // 6 = 2 whole batches (update_train_iters): 6 steps of
// 2 2 4 6 6 6 samples, 26 consumed, the learning rate by hand at each.
TEST_CASE("batch size schedule: the ramp-up trains step by step as Megatron's", "[batch_size][trainer]") {
  ScheduleRun run;
  run_schedule(run, {}, {"training.global_batch_size=6", "training.rampup_batch_size=[2,2,8]"});
  CHECK(run.result.final_iteration == 6);
  check_steps(run, {2, 2, 4, 6, 6, 6}, {2, 4, 8, 14, 20, 26});
}

// The step schedule: steps 1–7 consume 2 2 4 4 6 6 6 samples (1 1 2 2 3 3 3 micro-batches), 2 4 8
// 12 18 24 30 in all.
TEST_CASE("batch size schedule: training follows it, logs it and resumes across a change", "[batch_size][trainer]") {
  ScheduleRun full;
  run_schedule(full, {});
  REQUIRE(full.result.final_iteration == 7);
  check_steps(full, {2, 2, 4, 4, 6, 6, 6}, {2, 4, 8, 12, 18, 24, 30});
  CHECK(full.log.find("consumed samples:           12 |") != std::string::npos);
  CHECK(full.log.find("global batch size:     6 |") != std::string::npos);
  CHECK(full.log.find(" global batch size 4 (2 micro-batches per data-parallel rank) from 4 consumed samples") !=
        std::string::npos);

  // Megatron saves when the number of micro-batches changes (before steps 3 and 5), and at the end;
  // resuming from the checkpoint before step 5 reproduces steps 5–7 bit for bit.
  const fs::path dir = fs::temp_directory_path() / ("strata_test_batch_size_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ScheduleRun first;
  run_schedule(first, {"checkpoint.save=" + dir.string(), "training.exit_interval=4"});
  CHECK(first.result.saved_iterations == std::vector<int64_t>{2, 4});
  CHECK(std::vector<double>(full.result.losses.begin(), full.result.losses.begin() + 4) == first.result.losses);
  ScheduleRun resumed;
  run_schedule(resumed, {"checkpoint.load=" + dir.string()});
  CHECK(resumed.result.start_iteration == 4);
  CHECK(std::vector<double>(full.result.losses.begin() + 4, full.result.losses.end()) == resumed.result.losses);
  REQUIRE(resumed.sink.records.size() == 3);
  CHECK(resumed.sink.records[0]["batch-size"] == 6);
  CHECK(resumed.sink.records[2]["learning-rate"] == full.sink.records[6]["learning-rate"]);
  fs::remove_all(dir);
}
