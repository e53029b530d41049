// The learning-rate schedule across a resume (training/checkpointing/checkpoint_scheduler.h): a
// tiny run (global batch 6, warmup 3 iterations = 18 samples, cosine decay over 20 iterations =
// 120 samples from lr 0.05 to min_lr 1e-4) saves at iteration 10; the resume changes the config's
// lr to 0.1. Without a flag it is refused naming optimizer.lr (before allocation and in the
// Trainer); --use-checkpoint-opt_param-scheduler continues the checkpoint's schedule (the logged
// learning rates are the hand-computed cosine of 0.05, the losses those of the uninterrupted run);
// --override-opt_param-scheduler uses the config's (the cosine of 0.1). Both flags: refused.
// Reference values: lr after iteration i = 1e-4 + ½(cos(π(6i − 18)/102) + 1)(max − 1e-4), from
// Megatron's OptimizerParamScheduler.get_lr, evaluated in Python.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/unit/trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/checkpointing/checkpoint_paths.h"
#include "training/checkpointing/checkpoint_scheduler.h"
#include "training/observability/metrics_log.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

namespace {
const int64_t kVocab = 13;

struct Run {
  TrainResult result;
  std::map<int64_t, double> lr;  // the logged learning rate after each iteration
};

Run run(const ResolvedConfig& cfg) {
  BigramModel model(kVocab);
  MockBatchSource train(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed));
  std::ostringstream log;
  MemoryMetricsSink sink;
  TrainerOptions opt;
  opt.log_stream = &log;
  opt.sinks.push_back(&sink);
  opt.tensor_io = std::make_shared<TestSafetensorsIO>();
  Trainer trainer(cfg, model, train, nullptr, opt);
  Run r;
  r.result = trainer.train();
  for (const auto& s : sink.scalars)
    if (s.tag == "learning-rate") r.lr[s.step] = s.value;
  return r;
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("strata_test_sched_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

ResolvedConfig cfg_with(std::vector<std::string> extra) {
  extra.push_back("logging.log_interval=1");
  return tiny_config(extra);
}

std::string config_error_field(const std::function<void()>& f) {
  try {
    f();
  } catch (const config::ConfigError& e) { return e.field(); }
  return "(no ConfigError)";
}
}  // namespace

TEST_CASE("checkpoint scheduler: the schedule is saved, and a changed one is refused or chosen by the flags",
          "[checkpoint][checkpoint_scheduler]") {
  const fs::path dir = temp_dir("lr");
  const Run full = run(cfg_with({}));
  const Run first = run(cfg_with({"checkpoint.save=" + dir.string(), "checkpoint.save_interval=10",
                                  "training.exit_interval=10"}));
  REQUIRE(first.result.final_iteration == 10);

  // Megatron's scheduler state_dict, in samples.
  std::ifstream in(dir / "iter_0000010" / "manifest.json");
  const nlohmann::json m = nlohmann::json::parse(in);
  const nlohmann::json& s = m["optimizer"]["scheduler"];
  CHECK(s["max_lr"] == 0.05);
  CHECK(s["min_lr"] == 1.0e-4);
  CHECK(s["lr_warmup_steps"] == 18.0);
  CHECK(s["lr_decay_steps"] == 120);
  CHECK(s["lr_decay_style"] == "cosine");
  CHECK(s["start_wd"] == 0.1);
  CHECK(s["end_wd"] == 0.1);
  CHECK(s["wd_incr_steps"] == 120);
  CHECK(s["wd_incr_style"] == "constant");
  CHECK_FALSE(s.contains("decoupled_max_lr"));

  const std::string load = "checkpoint.load=" + dir.string();
  SECTION("the same schedule resumes without a flag") {
    const Run r = run(cfg_with({load}));
    CHECK(r.result.losses == std::vector<double>(full.result.losses.begin() + 10, full.result.losses.end()));
  }
  SECTION("a changed lr without a flag: refused by name, before allocation and in the Trainer") {
    const ResolvedConfig cfg = cfg_with({load, "optimizer.lr=0.1"});
    CHECK(config_error_field([&] { training::check_checkpoint_paths(cfg, false); }) == "optimizer.lr");
    const std::string msg = error_of([&] { run(cfg); });
    CHECK_THAT(msg, Catch::Contains("optimizer.lr: the checkpoint has 0.05, this run 0.1"));
    CHECK_THAT(msg, Catch::Contains("use_checkpoint_opt_param_scheduler"));
    // Every difference is listed: the decay length too, named by its field.
    const ResolvedConfig two = cfg_with({load, "optimizer.lr=0.1", "optimizer.lr_decay_iters=40"});
    const std::string both = error_of([&] { training::check_checkpoint_paths(two, false); });
    CHECK_THAT(both, Catch::Contains("optimizer.lr_decay_iters (× global_batch_size: decay samples): the checkpoint "
                                     "has 120, this run 240"));
    CHECK_THAT(both, Catch::Contains("optimizer.lr: the checkpoint has 0.05, this run 0.1"));
  }
  SECTION("use_checkpoint_opt_param_scheduler: the checkpoint's schedule") {
    const Run r = run(cfg_with({load, "optimizer.lr=0.1", "optimizer.lr_decay_iters=40",
                                "checkpoint.use_checkpoint_opt_param_scheduler=true"}));
    CHECK(r.lr.at(11) == Approx(0.027352095568609385).epsilon(1e-13));
    CHECK(r.lr.at(15) == Approx(0.010014265822337555).epsilon(1e-13));
    CHECK(r.lr.at(20) == 1.0e-4);
    for (int64_t i = 11; i <= 20; ++i) CHECK(r.lr.at(i) == full.lr.at(i));  // bitwise the saved run's
    CHECK(r.result.losses == std::vector<double>(full.result.losses.begin() + 10, full.result.losses.end()));
  }
  SECTION("override_opt_param_scheduler: the config's schedule") {
    const Run r = run(cfg_with({load, "optimizer.lr=0.1", "checkpoint.override_opt_param_scheduler=true"}));
    CHECK(r.lr.at(11) == Approx(0.05465880455519194).epsilon(1e-13));
    CHECK(r.lr.at(15) == Approx(0.019948399912856147).epsilon(1e-13));
    CHECK(r.result.losses != std::vector<double>(full.result.losses.begin() + 10, full.result.losses.end()));
  }
  SECTION("finetune and no_load_optim do not load the schedule: no check") {
    CHECK(run(cfg_with({load, "optimizer.lr=0.1", "checkpoint.no_load_optim=true"})).lr.at(11) ==
          Approx(0.05465880455519194).epsilon(1e-13));
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint scheduler: Megatron's flags and their exclusion", "[checkpoint_scheduler][config]") {
  const std::string yaml = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";
  const std::vector<std::string> base = {"--train-iters", "10", "--global-batch-size", "2", "--micro-batch-size", "1",
                                         "--load", "/tmp/x"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return extra;
  };
  CHECK(config_from_flags(yaml, with({"--use-checkpoint-opt_param-scheduler"})).checkpoint->use_checkpoint_opt_param_scheduler);
  CHECK(config_from_flags(yaml, with({"--use-checkpoint-opt-param-scheduler"})).checkpoint->use_checkpoint_opt_param_scheduler);
  CHECK(config_from_flags(yaml, with({"--override-opt_param-scheduler"})).checkpoint->override_opt_param_scheduler);
  CHECK(config_from_flags(yaml, with({"--override-opt-param-scheduler"})).checkpoint->override_opt_param_scheduler);
  CHECK(config_error_field([&] {
          config_from_flags(yaml, with({"--override-opt-param-scheduler", "--use-checkpoint-opt-param-scheduler"}));
        }) == "checkpoint.use_checkpoint_opt_param_scheduler");
}

TEST_CASE("checkpoint scheduler: the state's JSON reads back, decoupled rates compared", "[checkpoint_scheduler]") {
  LrScheduleState s;
  s.max_lr = 3.0e-4;
  s.min_lr = 3.0e-5;
  s.warmup_steps = 12.5;
  s.decay_steps = 1000;
  s.decay_style = LrDecayStyle::WSD;
  s.start_wd = 0.01;
  s.end_wd = 0.1;
  s.wd_incr_steps = 2000;
  s.wd_incr_style = WeightDecayIncrStyle::Cosine;
  s.decoupled_max_lr = 1.0e-3;
  s.decoupled_min_lr = 1.0e-5;
  const nlohmann::json j = nlohmann::json::parse(lr_schedule_json(s).dump());
  CHECK(j["lr_decay_style"] == "WSD");
  CHECK(j["wd_incr_style"] == "cosine");
  const LrScheduleState b = lr_schedule_from_json(j, "m.json");
  CHECK(b.max_lr == s.max_lr);
  CHECK(b.warmup_steps == 12.5);
  CHECK(b.decay_style == LrDecayStyle::WSD);
  CHECK(b.wd_incr_style == WeightDecayIncrStyle::Cosine);
  CHECK(b.decoupled_max_lr == 1.0e-3);
  CHECK(b.decoupled_min_lr == 1.0e-5);
  nlohmann::json bad = j;
  bad["lr_decay_style"] = "zigzag";
  CHECK_THAT(error_of([&] { lr_schedule_from_json(bad, "m.json"); }),
             Catch::Contains("m.json: \"optimizer.scheduler.lr_decay_style\" is 'zigzag'"));
  bad = j;
  bad.erase("min_lr");
  CHECK_THAT(error_of([&] { lr_schedule_from_json(bad, "m.json"); }), Catch::Contains("optimizer.scheduler.min_lr"));

  const ResolvedConfig cfg = tiny_config({"optimizer.decoupled_lr=0.2"});
  const LrScheduleState ours = config_lr_schedule_state(cfg);
  CHECK(ours.decoupled_max_lr == 0.2);
  CHECK(ours.decoupled_min_lr == 1.0e-4);  // decoupled_min_lr null: min_lr
  LrScheduleState saved = ours;
  saved.decoupled_max_lr = 0.3;
  const std::vector<std::string> d = lr_schedule_differences(saved, ours, cfg);
  REQUIRE(d.size() == 1);
  CHECK(d[0] == "optimizer.decoupled_lr: the checkpoint has 0.3, this run 0.2");
}
