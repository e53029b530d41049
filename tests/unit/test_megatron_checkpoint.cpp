// Megatron-Core's own checkpoints resumed by Strata (training/checkpointing/megatron/): each
// fixture of tests/fixtures/megatron_ckpt (written by Megatron-Core 0.19.2 on a CPU after two
// steps, with the batches and losses it recorded) is loaded with Megatron's own command line read
// by Strata's flag parser; the forward loss on Megatron's check batch must be the loss Megatron
// recorded, and three more steps on Megatron's batches must give Megatron's continued losses.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "tests/unit/megatron_fixture_support.h"
#include "training/run.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;

namespace {

struct ResumeResult {
  double check_loss = 0.0;
  std::vector<double> losses;
};

ResumeResult resume_megatron_fixture(const std::string& c, const std::string& variant,
                                     const std::vector<std::string>& overrides = {}) {
  const MegatronRecord rec(c);
  std::vector<std::string> args = rec.argv(variant);
  for (const std::string& o : {"checkpoint.load=" + (megatron_fixture_dir(c) / variant).string(),
                               std::string("training.exit_interval=5"), std::string("training.eval_iters=1"),
                               std::string("data.mock_data=true"), std::string("logging.log_interval=1")})
    args.push_back(o);
  for (const std::string& o : overrides) args.push_back(o);
  const ResolvedConfig cfg = StrataConfig::load("", args).validate();
  const int64_t mbs = cfg.training->micro_batch_size;
  training::RunHooks hooks;
  std::ostringstream log;
  hooks.log_stream = &log;
  hooks.train_data = [&](int64_t dp_rank, int64_t dp_size) {
    return std::make_unique<RecordedBatchSource>(rec.j.at("continued"), nullptr, mbs, dp_rank, dp_size);
  };
  const nlohmann::json check = rec.j.at("check_batch");
  hooks.valid_data = [&](int64_t dp_rank, int64_t dp_size) {
    return std::make_unique<RecordedBatchSource>(nlohmann::json::array(), &check, mbs, dp_rank, dp_size);
  };
  ResumeResult out;
  hooks.with_trainer = [&](Trainer& t) { out.check_loss = t.evaluate(0).loss; };
  const TrainResult r = training::run_training(cfg, hooks);
  INFO(log.str());
  REQUIRE(r.start_iteration == 2);
  out.losses = r.losses;
  return out;
}

void check_against_megatron(const std::string& c, const std::string& variant, const ResumeResult& got) {
  const MegatronRecord rec(c);
  CHECK(got.check_loss == Approx(rec.loss_at_checkpoint()).epsilon(2e-6));
  const auto want = rec.continued_losses(variant);
  REQUIRE(got.losses.size() == want.size());
  size_t i = 0;
  for (const auto& [iteration, loss] : want) {
    CAPTURE(iteration);
    CHECK(got.losses[i++] == Approx(loss).epsilon(2e-6));
  }
}

}  // namespace

TEST_CASE("Megatron torch_dist and legacy torch checkpoints resume with Megatron's losses", "[megatron_ckpt]") {
  for (const auto& [c, variant] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "torch_dist"}, {"llama", "torch_dist_distopt"}, {"gpt2", "torch_dist_distopt"},
           {"moe", "torch_dist_distopt"}, {"mtp", "torch_dist_distopt"}, {"llama", "torch"}, {"llama", "torch_distopt"},
           {"gpt2", "torch"}, {"moe", "torch"}, {"mtp", "torch"}}) {
    CAPTURE(c, variant);
    check_against_megatron(c, variant, resume_megatron_fixture(c, variant));
  }
}
