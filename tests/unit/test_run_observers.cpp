// The run's observers (training/observability/run_observers.h) in a training run: each StepObserver is asked
// per training iteration and evaluation pass which kinds it wants, sees only those, and gets the
// observation context of every forward (0-based iteration, micro-batch, phase); end_step follows
// each scope, finish the run; a step it declines installs nothing (the model's sites stay off).
#include <catch2/catch.hpp>

#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/batch_source.h"
#include "training/config/model_factory.h"
#include "training/observability/run_observers.h"
#include "training/trainer.h"

namespace strata {
namespace {

struct Probe : StepObserver {
  std::vector<std::tuple<int64_t, int64_t, ObservationPhase, std::string>> seen;  // iteration, mb, phase, owner
  std::vector<std::pair<int64_t, ObservationPhase>> ended;
  int finished = 0;
  SourceKinds kinds_for(const ObservationContext& c) override {
    if (c.phase == ObservationPhase::Train && c.iteration == 1) return {};  // skips iteration 1
    return {SourceKind::RouterTopIndices};
  }
  void on_tensor(const Observation& o) override {
    const ObservationContext& c = observation_context();
    seen.emplace_back(c.iteration, c.micro_batch, c.phase, std::string(o.owner));
  }
  void end_step(const ObservationContext& c) override { ended.emplace_back(c.iteration, c.phase); }
  void finish() override { ++finished; }
};

TEST_CASE("run observers: per-step kinds, the context of every forward, end_step and finish", "[observe]") {
  const ResolvedConfig cfg = test::tiny_config(
      {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=50",
       "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false", "model.num_experts=4",
       "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2", "model.moe_layer_freq=[0, 1]",
       "training.train_iters=3", "training.micro_batch_size=2", "training.global_batch_size=4",
       "training.eval_interval=2", "training.eval_iters=1"});
  auto model = make_model(cfg, Device::cpu());
  MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  MockBatchSource valid(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 2);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *model, train, &valid, opt);
  Probe probe;
  trainer.observers().add(probe);
  trainer.train();
  // Iterations 0 and 2, two micro-batches each, layer 1's router; the evaluation after iteration 2
  // (eval_interval 2: after the 2nd iteration, at iteration_ = 2) also two micro-batches.
  using P = ObservationPhase;
  const std::string r = "decoder.layers.1.mlp.router";
  std::vector<std::tuple<int64_t, int64_t, ObservationPhase, std::string>> want = {
      {0, 0, P::Train, r}, {0, 1, P::Train, r}, {2, 0, P::Eval, r}, {2, 1, P::Eval, r},
      {2, 0, P::Train, r}, {2, 1, P::Train, r}};
  CHECK(probe.seen == want);
  CHECK(probe.ended == std::vector<std::pair<int64_t, ObservationPhase>>{{0, P::Train}, {2, P::Eval}, {2, P::Train}});
  CHECK(probe.finished == 1);
  CHECK_FALSE(is_observing(SourceKind::RouterTopIndices));  // nothing left installed
}

// Wants every kind, in the iterations of `due` only (none: never due); counts what it sees.
struct AllKinds : StepObserver {
  std::set<int64_t> due;
  int64_t seen = 0;
  SourceKinds kinds_for(const ObservationContext& c) override {
    return due.count(c.iteration) ? SourceKinds::all() : SourceKinds{};
  }
  void on_tensor(const Observation&) override { ++seen; }
};

TEST_CASE("run observers: with no observer due, training is bit-identical, observing changes no number",
          "[observe]") {
  const ResolvedConfig cfg = test::tiny_config(
      {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=50",
       "model.make_vocab_size_divisible_by=8", "model.add_bias_linear=false", "model.num_experts=4",
       "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2", "model.moe_layer_freq=[0, 1]",
       "model.hidden_dropout=0.1", "training.train_iters=4", "training.micro_batch_size=2",
       "training.global_batch_size=4", "training.eval_interval=2", "training.eval_iters=1"});
  auto run = [&](AllKinds* observer) {
    auto model = make_model(cfg, Device::cpu());
    MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
    MockBatchSource valid(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 2);
    std::ostringstream log;
    TrainerOptions opt;
    opt.log_stream = &log;
    Trainer trainer(cfg, *model, train, &valid, opt);
    if (observer) trainer.observers().add(*observer);
    return trainer.train();
  };
  const TrainResult base = run(nullptr);
  REQUIRE(base.losses.size() == 4);
  AllKinds never;  // registered, every kind, never due
  const TrainResult idle = run(&never);
  CHECK(never.seen == 0);
  AllKinds always;  // every kind in every iteration: residual contributions, router scores … computed
  always.due = {0, 1, 2, 3, 4};
  const TrainResult observed = run(&always);
  CHECK(always.seen > 0);
  for (const TrainResult* r : {&idle, &observed}) {
    CHECK(r->losses == base.losses);  // exact: bit-identical doubles
    CHECK(r->grad_norms == base.grad_norms);
    REQUIRE(r->validations.size() == base.validations.size());
    for (size_t i = 0; i < base.validations.size(); ++i)
      CHECK(r->validations[i].second.losses == base.validations[i].second.losses);
  }
}

}  // namespace
}  // namespace strata
