// Test support for Megatron-Core checkpoint fixtures (tests/fixtures/megatron_ckpt/, written by
// Megatron-Core itself: scripts/megatron/checkpoint_fixtures/make_fixtures.py): the record.json of
// a case (Megatron's command line per variant, the batches it trained on, its losses), a
// BatchSource replaying those batches under any data-parallel layout, and the Strata config of a
// variant: Megatron's own command line read by Strata's flag parser (core/megatron_flags.h); a resume
// through training::run_training and the check of its losses against Megatron's.
#pragma once
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "strata_source_dir.h"
#include "training/batch_source.h"
#include "training/checkpointing/checkpoint_paths.h"
#include "training/run.h"
#include "training/trainer.h"
#include "training/config/config.h"

namespace strata::test {

inline std::filesystem::path megatron_fixture_dir(const std::string& c) {
  return std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "megatron_ckpt" / c;
}

struct MegatronRecord {
  nlohmann::json j;
  explicit MegatronRecord(const std::string& c) {
    std::ifstream in(megatron_fixture_dir(c) / "record.json");
    std::stringstream s;
    s << in.rdbuf();
    j = nlohmann::json::parse(s.str());
  }
  double loss_at_checkpoint() const { return j.at("loss_at_checkpoint").get<double>(); }
  // The continued steps of a variant: iteration → Megatron's "lm loss".
  std::map<int64_t, double> continued_losses(const std::string& variant) const {
    std::map<int64_t, double> out;
    for (const auto& c : j.at("continued"))
      out[c.at("iteration").get<int64_t>()] = c.at("losses_per_variant").at(variant).at("lm loss").get<double>();
    return out;
  }
  // Megatron's command line of a variant, without --save / --load (the test places those).
  std::vector<std::string> argv(const std::string& variant) const {
    std::vector<std::string> out;
    const auto a = j.at("megatron_argv").at(variant).get<std::vector<std::string>>();
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == "--save" || a[i] == "--load") {
        ++i;
        continue;
      }
      out.push_back(a[i]);
    }
    return out;
  }
};

// Replays recorded micro-batches: iteration → Megatron's micro-batches (dp = 1), re-cut for this
// rank with Megatron's sampler (pretraining_sample_index); a step without a record replays `fallback`.
class RecordedBatchSource : public BatchSource {
 public:
  RecordedBatchSource(const nlohmann::json& steps, const nlohmann::json* fallback, int64_t mbs, int64_t dp_rank,
                      int64_t dp_size)
      : mbs_(mbs), dp_rank_(dp_rank), dp_size_(dp_size) {
    for (const auto& s : steps) add(s.at("iteration").get<int64_t>(), s.at("micro_batches"));
    if (fallback) add(0, nlohmann::json::array({*fallback}));
  }
  Batch next_microbatch(const StepPosition& at, int64_t micro_batch) override {
    const auto it = samples_.count(at.step) ? samples_.find(at.step) : samples_.find(0);
    REQUIRE(it != samples_.end());
    const auto& rows = it->second;
    std::vector<int64_t> tokens, labels;
    std::vector<float> mask;
    for (int64_t r = 0; r < mbs_; ++r) {
      const int64_t g = pretraining_sample_index(0, micro_batch, r, mbs_, dp_rank_, dp_size_) %
                        static_cast<int64_t>(rows.size());
      const Row& row = rows[static_cast<size_t>(g)];
      tokens.insert(tokens.end(), row.tokens.begin(), row.tokens.end());
      labels.insert(labels.end(), row.labels.begin(), row.labels.end());
      mask.insert(mask.end(), row.mask.begin(), row.mask.end());
    }
    const int64_t s = static_cast<int64_t>(rows.front().tokens.size());
    Batch b;
    b.tokens = Tensor::from_data(tokens, Shape({mbs_, s}));
    b.labels = Tensor::from_data(labels, Shape({mbs_, s}));
    b.loss_mask = Tensor::from_data(mask, Shape({mbs_, s}));
    b.first_sample_index = at.first_sample + (micro_batch * dp_size_ + dp_rank_) * mbs_;
    b.step_first_sample = at.first_sample;
    b.step_global_batch = at.global_batch;
    return b;
  }

 private:
  struct Row {
    std::vector<int64_t> tokens, labels;
    std::vector<float> mask;
  };
  void add(int64_t step, const nlohmann::json& micro_batches) {
    auto& rows = samples_[step];
    for (const auto& mb : micro_batches)
      for (size_t r = 0; r < mb.at("tokens").size(); ++r)
        rows.push_back({mb.at("tokens")[r].get<std::vector<int64_t>>(), mb.at("labels")[r].get<std::vector<int64_t>>(),
                        mb.at("loss_mask")[r].get<std::vector<float>>()});
  }
  int64_t mbs_, dp_rank_, dp_size_;
  std::map<int64_t, std::vector<Row>> samples_;
};

// Resumes fixture case `c`'s `variant` with Megatron's own command line plus `overrides` (a layout,
// a save), replaying Megatron's batches for the continued steps and its check batch for one
// evaluation right after the load.
struct ResumeResult {
  double check_loss = 0.0;
  std::vector<double> losses;
};

inline ResumeResult resume_megatron_fixture(const std::string& c, const std::string& variant,
                                     const std::vector<std::string>& overrides = {}, int64_t start = 2,
                                     int64_t world = 1) {
  const MegatronRecord rec(c);
  std::vector<std::string> args = rec.argv(variant);
  for (const std::string& o : {"checkpoint.load=" + (megatron_fixture_dir(c) / variant).string(),
                               std::string("training.exit_interval=5"), std::string("training.eval_iters=1"),
                               std::string("data.mock_data=true"), std::string("logging.log_interval=1")})
    args.push_back(o);
  for (const std::string& o : overrides) args.push_back(o);
  // As `strata train` does (apps/strata/commands.cpp): --use-checkpoint-args before validation.
  const ResolvedConfig cfg = training::with_checkpoint_args(StrataConfig::load("", args)).validate(world);
  const int64_t mbs = cfg.training->micro_batch_size;
  training::RunHooks hooks;
  std::ostringstream log;
  hooks.log_stream = &log;
  const nlohmann::json check = rec.j.at("check_batch");  // also the steps a finetune adds
  hooks.train_data = [&](int64_t dp_rank, int64_t dp_size) {
    return std::make_unique<RecordedBatchSource>(rec.j.at("continued"), &check, mbs, dp_rank, dp_size);
  };
  hooks.valid_data = [&](int64_t dp_rank, int64_t dp_size) {
    return std::make_unique<RecordedBatchSource>(nlohmann::json::array(), &check, mbs, dp_rank, dp_size);
  };
  ResumeResult out;
  hooks.with_trainer = [&](Trainer& t) { out.check_loss = t.evaluate(0).loss; };
  const TrainResult r = training::run_training(cfg, hooks);
  INFO(log.str());
  REQUIRE(r.start_iteration == start);
  out.losses = r.losses;
  return out;
}

// check_loss false: a fixture without a check loss (a pipelined Megatron run cannot compute one).
inline void check_against_megatron(const std::string& c, const std::string& variant, const ResumeResult& got,
                                   bool check_loss = true) {
  const MegatronRecord rec(c);
  if (check_loss) CHECK(got.check_loss == Approx(rec.loss_at_checkpoint()).epsilon(2e-6));
  const auto want = rec.continued_losses(variant);
  REQUIRE(got.losses.size() == want.size());
  size_t i = 0;
  for (const auto& [iteration, loss] : want) {
    CAPTURE(iteration);
    CHECK(got.losses[i++] == Approx(loss).epsilon(2e-6));
  }
}


}  // namespace strata::test
