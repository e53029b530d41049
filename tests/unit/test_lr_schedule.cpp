// LrSchedule (training/optimizer/lr_schedule.h): exact values of Megatron's OptimizerParamScheduler.get_lr at
// several steps — warmup from 0, constant, linear, cosine, WSD with each anneal shape — computed
// here from the formulas, plus the config path (lr_warmup_fraction) and bad arguments.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "training/optimizer/lr_schedule.h"

using namespace strata;

namespace {
const double kPi = std::numbers::pi;
}

TEST_CASE("lr_schedule: linear warmup from 0, inclusive of the last warmup step", "[lr_schedule]") {
  LrSchedule s(1.0e-3, 1.0e-5, LrDecayStyle::Linear, 10, 110);
  CHECK(s.lr(0) == 0.0);
  CHECK(s.lr(1) == 1.0e-3 * 1.0 / 10.0);
  CHECK(s.lr(5) == 1.0e-3 * 5.0 / 10.0);
  CHECK(s.lr(10) == 1.0e-3 * 10.0 / 10.0);
}

TEST_CASE("lr_schedule: constant after warmup", "[lr_schedule]") {
  LrSchedule s(3.0e-4, 0.0, LrDecayStyle::Constant, 4, 0);
  CHECK(s.lr(2) == 3.0e-4 * 2.0 / 4.0);
  for (int64_t n : {5, 100, 100000}) CHECK(s.lr(n) == 3.0e-4);
  LrSchedule no_warmup(3.0e-4, 0.0, LrDecayStyle::Constant, 0, 0);
  CHECK(no_warmup.lr(0) == 3.0e-4);
}

TEST_CASE("lr_schedule: linear decay to min_lr, min_lr after lr_decay_iters", "[lr_schedule]") {
  const double mx = 1.0e-3, mn = 1.0e-4;
  LrSchedule s(mx, mn, LrDecayStyle::Linear, 10, 110);
  for (int64_t n : {11, 35, 60, 109, 110}) {
    const double ratio = static_cast<double>(n - 10) / 100.0;
    CHECK(s.lr(n) == mn + (1.0 - ratio) * (mx - mn));
  }
  CHECK(s.lr(60) == Approx(mn + 0.5 * (mx - mn)).epsilon(1e-15));
  CHECK(s.lr(110) == Approx(mn).epsilon(1e-15));
  CHECK(s.lr(111) == mn);
  CHECK(s.lr(5000) == mn);
}

TEST_CASE("lr_schedule: cosine decay", "[lr_schedule]") {
  const double mx = 6.0e-4, mn = 6.0e-5;
  LrSchedule s(mx, mn, LrDecayStyle::Cosine, 100, 1100);
  for (int64_t n : {101, 350, 600, 850, 1099, 1100}) {
    const double ratio = static_cast<double>(n - 100) / 1000.0;
    CHECK(s.lr(n) == mn + 0.5 * (std::cos(kPi * ratio) + 1.0) * (mx - mn));
  }
  CHECK(s.lr(600) == Approx(0.5 * (mx + mn)).epsilon(1e-14));
  CHECK(s.lr(1100) == Approx(mn).epsilon(1e-14));
  CHECK(s.lr(1101) == mn);
}

TEST_CASE("lr_schedule: WSD stable phase then each anneal shape", "[lr_schedule]") {
  const double mx = 1.0e-3, mn = 1.0e-5;
  // warmup 10, decay over 110, anneal in the last 20 steps (from step 90).
  struct Case {
    WsdDecayStyle style;
    double (*coeff)(double);
  };
  const Case cases[] = {
      {WsdDecayStyle::Linear, [](double r) { return 1.0 - r; }},
      {WsdDecayStyle::Cosine, [](double r) { return 0.5 * (std::cos(std::numbers::pi * r) + 1.0); }},
      {WsdDecayStyle::Exponential, [](double r) { return 2.0 * std::pow(0.5, r) - 1.0; }},
      {WsdDecayStyle::MinusSqrt, [](double r) { return 1.0 - std::sqrt(r); }},
  };
  for (const Case& c : cases) {
    LrSchedule s(mx, mn, LrDecayStyle::WSD, 10, 110, c.style, 20);
    CHECK(s.lr(10) == mx);
    CHECK(s.lr(11) == mn + 1.0 * (mx - mn));
    CHECK(s.lr(90) == mn + 1.0 * (mx - mn));
    for (int64_t n : {91, 95, 100, 109, 110}) {
      const double r = static_cast<double>(n - 90) / 20.0;
      CHECK(s.lr(n) == mn + c.coeff(r) * (mx - mn));
    }
    CHECK(s.lr(110) == Approx(mn).margin(1e-18));
    CHECK(s.lr(111) == mn);
  }
}

TEST_CASE("lr_schedule: from OptimizerConfig, warmup as a fraction of lr_decay_iters", "[lr_schedule]") {
  OptimizerConfig o;
  o.lr = 2.0e-4;
  o.min_lr = 2.0e-5;
  o.lr_decay_style = LrDecayStyle::Linear;
  o.lr_decay_iters = 200;
  o.lr_warmup_fraction = 0.1;  // 20 warmup iterations
  TrainingConfig t;
  t.global_batch_size = 1;
  LrSchedule s(o, t);
  CHECK(s.warmup_steps() == 20.0);
  CHECK(s.lr(10) == 2.0e-4 * 10.0 / 20.0);
  CHECK(s.lr(110) == 2.0e-5 + (1.0 - 90.0 / 180.0) * (2.0e-4 - 2.0e-5));
  // Megatron keeps the fraction's warmup unrounded, in samples: 0.003 × 430 iterations × 4 samples
  // = 5.16 samples; after 1 iteration (4 samples) 2e-4 · 4 / 5.16; after 2 (8 samples) the decay
  // ratio is (8 − 5.16) / (1720 − 5.16).
  o.lr_decay_iters = 430;
  o.lr_warmup_fraction = 0.003;
  t.global_batch_size = 4;
  LrSchedule f(o, t);
  CHECK(f.warmup_steps() == 0.003 * 1720.0);
  CHECK(f.lr(4) == 2.0e-4 * 4.0 / (0.003 * 1720.0));
  CHECK(f.lr(8) == 2.0e-5 + (1.0 - (8.0 - 0.003 * 1720.0) / (1720.0 - 0.003 * 1720.0)) * (2.0e-4 - 2.0e-5));
}

TEST_CASE("lr_schedule: --lr-warmup-init and inverse-square-root, as Megatron's get_lr computes them",
          "[lr_schedule]") {
  OptimizerConfig o;
  o.lr = 1.0e-3;
  o.min_lr = 1.0e-4;
  o.lr_warmup_init = 2.0e-4;
  o.lr_warmup_iters = 4;
  o.lr_decay_iters = 100;
  o.lr_decay_style = LrDecayStyle::InverseSquareRoot;
  TrainingConfig t;
  t.global_batch_size = 1;
  LrSchedule s(o, t);
  CHECK(s.lr(0) == 2.0e-4);
  CHECK(s.lr(1) == 2.0e-4 + (1.0e-3 - 2.0e-4) * 1.0 / 4.0);
  CHECK(s.lr(4) == 1.0e-3);
  // After the warmup: lr · sqrt(4) / sqrt(n), floored at min_lr; min_lr past the decay.
  CHECK(s.lr(9) == 1.0e-3 * 2.0 / 3.0);
  CHECK(s.lr(25) == 1.0e-3 * 2.0 / 5.0);
  CHECK(s.lr(100) == 1.0e-3 * 2.0 / 10.0);  // 2e-4, above min_lr
  CHECK(s.lr(101) == 1.0e-4);
  // Without a warmup Megatron uses max(warmup, 1) = 1: lr / sqrt(n), never below min_lr.
  LrSchedule n(1.0e-3, 3.0e-4, LrDecayStyle::InverseSquareRoot, 0, 1000);
  CHECK(n.lr(0) == 1.0e-3);
  CHECK(n.lr(4) == 1.0e-3 / 2.0);
  CHECK(n.lr(16) == 3.0e-4);  // 2.5e-4 floored
}

TEST_CASE("lr_schedule: bad arguments are rejected", "[lr_schedule]") {
  CHECK_THROWS_WITH(LrSchedule(1e-3, 1e-2, LrDecayStyle::Linear, 0, 10), Catch::Contains("min_lr"));
  CHECK_THROWS_WITH(LrSchedule(1e-3, 0, LrDecayStyle::Linear, 10, 5), Catch::Contains("the decay"));
  CHECK_THROWS_WITH(LrSchedule(1e-3, 0, LrDecayStyle::Cosine, 0, 0), Catch::Contains("the decay"));
  // Warmup as long as the decay (allowed by the config): warmup, then min_lr.
  LrSchedule all_warmup(1e-3, 1e-4, LrDecayStyle::Linear, 10, 10);
  CHECK(all_warmup.lr(10) == 1e-3);
  CHECK(all_warmup.lr(11) == 1e-4);
  CHECK_THROWS_WITH(LrSchedule(1e-3, 0, LrDecayStyle::WSD, 0, 10, WsdDecayStyle::Linear, 0),
                    Catch::Contains("WSD decay steps"));
  OptimizerConfig unresolved;
  CHECK_THROWS_WITH(LrSchedule(unresolved, TrainingConfig{}), Catch::Contains("optimizer.lr"));
}

// Megatron's sample-based schedule (get_optimizer_param_scheduler with --train-samples): the
// scheduler counts samples, stepping by the global batch size. Worked by hand for train_samples
// 1000, global batch 8 (update_train_iters: 1000 // 8 = 125 iterations), lr 1e-3, min_lr 1e-4,
// cosine, lr_warmup_samples 20 (not a whole number of batches), lr_decay_samples 820:
//   after iteration 2 (16 samples): warmup 1e-3 · 16 / 20 = 8e-4
//   after iteration 3 (24 samples): decay ratio (24 − 20) / (820 − 20) = 0.005,
//                                   1e-4 + 9e-4 · ½(cos(0.005π) + 1)
//   after iteration 54 (432 samples): ratio (432 − 20) / 800 = 0.515
//   after iteration 103 (824 samples): past the decay, min_lr
TEST_CASE("lr_schedule: sample-based training counts samples, as Megatron's --train-samples", "[lr_schedule]") {
  StrataConfig cfg = StrataConfig::from_yaml_text(
      "optimizer:\n  lr: 1.0e-3\n  min_lr: 1.0e-4\n  lr_decay_style: cosine\ndata:\n  mock_data: true\n", {},
      "samples.yaml");
  StrataConfig::table().apply_command_line({"--train-samples", "1000", "--global-batch-size", "8", "--lr-warmup-samples",
                                            "20", "--lr-decay-samples", "820"},
                                           cfg, nullptr);
  const ResolvedConfig resolved = cfg.validate(1);
  CHECK(resolved.training->train_iters == 125);
  const LrSchedule s(*resolved.optimizer, *resolved.training);
  const double pi = std::numbers::pi;
  CHECK(s.lr(0) == 0.0);
  CHECK(s.lr(16) == Approx(8e-4).epsilon(1e-15));
  CHECK(s.lr(24) == Approx(1e-4 + 9e-4 * 0.5 * (std::cos(pi * 0.005) + 1.0)).epsilon(1e-15));
  CHECK(s.lr(432) == Approx(1e-4 + 9e-4 * 0.5 * (std::cos(pi * 0.515) + 1.0)).epsilon(1e-15));
  CHECK(s.lr(816) == Approx(1e-4 + 9e-4 * 0.5 * (std::cos(pi * 796.0 / 800.0) + 1.0)).epsilon(1e-15));
  CHECK(s.lr(824) == 1e-4);
  // Without lr_decay_samples: the decay runs over train_samples; a warmup fraction is of it.
  const ResolvedConfig f =
      StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\n  lr_warmup_fraction: 0.1\ndata:\n  mock_data: true\n",
                                   {"training.train_samples=1000", "training.global_batch_size=8"}, "fraction.yaml")
          .validate(1);
  CHECK(f.optimizer->lr_decay_samples == 1000);
  CHECK(LrSchedule(*f.optimizer, *f.training).lr(5 * 8) == Approx(1e-3 * 40.0 / 100.0).epsilon(1e-15));
  // Megatron's rules: the two kinds of length do not mix.
  auto error_of = [](const std::vector<std::string>& o) {
    try {
      const StrataConfig c =
          StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", o, "x.yaml");
      static_cast<void>(c.validate(1));
    } catch (const std::exception& e) { return std::string(e.what()); }
    return std::string("(no error)");
  };
  CHECK_THAT(error_of({"training.train_samples=800", "training.train_iters=50"}),
             Catch::Contains("training.train_iters: set together with training.train_samples"));
  CHECK_THAT(error_of({"training.train_samples=800", "optimizer.lr_decay_iters=50"}),
             Catch::Contains("optimizer.lr_decay_iters: is iteration-based"));
  CHECK_THAT(error_of({"training.train_samples=800", "optimizer.lr_warmup_iters=5"}),
             Catch::Contains("optimizer.lr_warmup_iters"));
  CHECK_THAT(error_of({"optimizer.lr_warmup_samples=50"}), Catch::Contains("needs sample-based training"));
  CHECK_THAT(error_of({"training.train_samples=800", "optimizer.lr_decay_style=WSD"}),
             Catch::Contains("optimizer.lr_wsd_decay_samples: required"));
  CHECK_THAT(error_of({"training.train_samples=3", "training.global_batch_size=8"}),
             Catch::Contains("less than one global batch"));
}

// Megatron's get_wd over train_iters 10 × global batch 4 = 40 samples, 0.0 → 0.1:
// linear after 10 samples 0.1 · 10/40 = 0.025; cosine 0.1 · ½(cos(π · 0.75) + 1); past the end 0.1.
TEST_CASE("lr_schedule: the weight-decay increment (--start/--end-weight-decay), by hand", "[lr_schedule]") {
  auto cfg = [](const std::string& style) {
    StrataConfig c = StrataConfig::from_yaml_text(
        "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n",
        {"training.train_iters=10", "training.global_batch_size=4", "training.micro_batch_size=4"}, "wd.yaml");
    StrataConfig::table().apply_command_line(
        {"--start-weight-decay", "0.0", "--end-weight-decay", "0.1", "--weight-decay-incr-style", style}, c, nullptr);
    const ResolvedConfig resolved = c.validate(1);
    return LrSchedule(*resolved.optimizer, *resolved.training);
  };
  const LrSchedule linear = cfg("linear"), cosine = cfg("cosine");
  CHECK(linear.weight_decay(0) == 0.0);
  CHECK(linear.weight_decay(10) == 0.1 * 10.0 / 40.0);
  CHECK(linear.weight_decay(40) == Approx(0.1).epsilon(1e-15));
  CHECK(linear.weight_decay(41) == 0.1);
  CHECK(cosine.weight_decay(10) == 0.1 * 0.5 * (std::cos(std::numbers::pi * 0.75) + 1.0));
  CHECK(cosine.weight_decay(0) == Approx(0.0).margin(1e-18));
  // constant: weight_decay throughout; Megatron's rules on the two ends.
  const ResolvedConfig c =
      StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\n  weight_decay: 0.05\ndata:\n  mock_data: true\n", {},
                                   "c.yaml")
          .validate(1);
  CHECK(LrSchedule(*c.optimizer, *c.training).weight_decay(123) == 0.05);
  auto error_of = [](const std::vector<std::string>& flags) {
    try {
      StrataConfig e = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n", {}, "e.yaml");
      StrataConfig::table().apply_command_line(flags, e, nullptr);
      static_cast<void>(e.validate(1));
    } catch (const std::exception& x) { return std::string(x.what()); }
    return std::string("(no error)");
  };
  CHECK(error_of({"--start-weight-decay", "0.1"}).find("optimizer.start_weight_decay: needs") != std::string::npos);
  CHECK(error_of({"--weight-decay-incr-style", "linear", "--start-weight-decay", "0"})
            .find("optimizer.end_weight_decay: required") != std::string::npos);
}
