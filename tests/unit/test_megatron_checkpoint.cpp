// Megatron-Core's own checkpoints resumed by Strata (training/checkpointing/megatron/): each
// fixture of tests/fixtures/megatron_ckpt (written by Megatron-Core 0.19.2 on a CPU after two
// steps, with the batches and losses it recorded) is loaded with Megatron's own command line read
// by Strata's flag parser; the forward loss on Megatron's check batch must be the loss Megatron
// recorded, and three more steps on Megatron's batches must give Megatron's continued losses.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "tests/unit/megatron_fixture_support.h"
#include "training/run.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;


TEST_CASE("Megatron torch_dist checkpoints resume with Megatron's losses", "[megatron_ckpt]") {
  for (const auto& [c, variant] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "torch_dist"}, {"llama", "torch_dist_distopt"}, {"gpt2", "torch_dist_distopt"},
           {"moe", "torch_dist_distopt"}, {"mtp", "torch_dist_distopt"}}) {
    CAPTURE(c, variant);
    check_against_megatron(c, variant, resume_megatron_fixture(c, variant));
  }
}

TEST_CASE("a checkpoint Strata saves as torch_dist resumes with Megatron's losses", "[megatron_ckpt]") {
  // Strata resumes Megatron's iteration-2 checkpoint, trains step 3 and saves it as torch_dist; a
  // second run resumes from that and must continue with Megatron's losses for steps 4 and 5.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("strata_mtd_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  for (const std::string variant : {"torch_dist", "torch_dist_distopt"}) {
    CAPTURE(variant);
    const std::filesystem::path save = dir / variant;
    resume_megatron_fixture("llama", variant,
                            {"training.exit_interval=3", "checkpoint.save=" + save.string(), "checkpoint.save_interval=3",
                             "checkpoint.ckpt_format=torch_dist"});
    REQUIRE(std::filesystem::exists(save / "iter_0000003" / "metadata.json"));
    REQUIRE(std::filesystem::exists(save / "iter_0000003" / ".metadata"));
    const MegatronRecord rec("llama");
    const auto want = rec.continued_losses(variant);
    const ResumeResult again = resume_megatron_fixture("llama", variant, {"checkpoint.load=" + save.string()}, 3);
    REQUIRE(again.losses.size() == 2);
    CHECK(again.losses[0] == Approx(want.at(4)).epsilon(2e-6));
    CHECK(again.losses[1] == Approx(want.at(5)).epsilon(2e-6));
  }
  std::filesystem::remove_all(dir);
}

// For scripts/megatron/checkpoint_fixtures/check_strata_into_megatron.sh (not run by ctest): Strata
// trains case $STRATA_MEGATRON_CASE from its own initialisation on Megatron's recorded batches for
// steps 1-5, saving iteration 2 as torch_dist under $STRATA_MEGATRON_EXPORT_DIR, and prints its
// losses of steps 3-5 as JSON; Megatron-Core then loads that checkpoint and must continue with them.
TEST_CASE("export a Strata-trained torch_dist checkpoint for Megatron", "[.megatron_export]") {
  const char* out = std::getenv("STRATA_MEGATRON_EXPORT_DIR");
  const char* c = std::getenv("STRATA_MEGATRON_CASE");
  REQUIRE(out);
  const std::string name = c ? c : "llama";
  const std::string variant = std::getenv("STRATA_MEGATRON_VARIANT") ? std::getenv("STRATA_MEGATRON_VARIANT") : "torch_dist";
  const MegatronRecord rec(name);
  std::vector<std::string> args = rec.argv(variant);
  for (const std::string& o : {std::string("training.exit_interval=5"), std::string("data.mock_data=true"),
                               std::string("checkpoint.save=") + out, std::string("checkpoint.save_interval=2"),
                               std::string("checkpoint.ckpt_format=torch_dist"), std::string("training.eval_iters=1")})
    args.push_back(o);
  const ResolvedConfig cfg = StrataConfig::load("", args).validate();
  nlohmann::json steps = rec.j.at("trained_before_save");
  for (const auto& s : rec.j.at("continued")) steps.push_back(s);
  training::RunHooks hooks;
  std::ostringstream log;
  hooks.log_stream = &log;
  const int64_t mbs = cfg.training->micro_batch_size;
  hooks.train_data = [&](int64_t dp_rank, int64_t dp_size) {
    return std::make_unique<RecordedBatchSource>(steps, nullptr, mbs, dp_rank, dp_size);
  };
  const TrainResult r = training::run_training(cfg, hooks);
  REQUIRE(r.losses.size() == 5);
  std::cout << nlohmann::json({{"strata_continued", {r.losses[2], r.losses[3], r.losses[4]}}}).dump() << std::endl;
}
