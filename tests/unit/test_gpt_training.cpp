// The GPT model under the trainer: same seed → bitwise-identical losses, the loss falls on a
// learnable mock task, and resume from a checkpoint (real safetensors files) continues with
// bitwise-identical losses and weights, with hidden and attention dropout on, in f32 and bf16.
#include <filesystem>
#include <sstream>

#include "models/gpt/gpt_model.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/trainer.h"
#include "training/config/model_factory.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

namespace {
constexpr int64_t kGptVocab = 50;

ResolvedConfig gpt_config(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                                "model.vocab_size=50", "model.hidden_dropout=0.1", "model.attention_dropout=0.1",
                                "model.make_vocab_size_divisible_by=8", "training.train_iters=8"};
  o.insert(o.end(), extra.begin(), extra.end());
  return tiny_config(o);
}

struct GptRun {
  TrainResult result;
  std::vector<std::vector<double>> params;
};

GptRun run_gpt(const ResolvedConfig& cfg) {
  auto model_holder = make_gpt_model(cfg, Device::cpu());
  GPTModel& model = *model_holder;
  MockBatchSource train(kGptVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(),
                        static_cast<uint64_t>(cfg.training->seed));
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, model, train, nullptr, opt);
  GptRun r;
  r.result = trainer.train();
  for (Parameter* p : model.parameters()) r.params.push_back(p->value.to_vector());
  return r;
}
}  // namespace

TEST_CASE("gpt training: deterministic, and resume is bit-exact", "[gpt_training]") {
  for (const char* precision : {"fp32", "bf16"}) {
    INFO(precision);
    const std::string prec = std::string("training.precision=") + precision;
    const GptRun full = run_gpt(gpt_config({prec}));
    const GptRun again = run_gpt(gpt_config({prec}));
    REQUIRE(full.result.losses.size() == 8);
    CHECK(full.result.losses == again.result.losses);  // bitwise
    CHECK(full.params == again.params);

    const fs::path dir = fs::temp_directory_path() / ("strata_gpt_resume_" + std::string(precision));
    fs::remove_all(dir);
    const GptRun first = run_gpt(gpt_config({prec, "checkpoint.save=" + dir.string(), "checkpoint.save_interval=4",
                                             "training.exit_interval=4"}));
    REQUIRE(first.result.final_iteration == 4);
    REQUIRE(read_checkpoint_tracker(dir.string()) == 4);
    const GptRun resumed = run_gpt(gpt_config({prec, "checkpoint.load=" + dir.string()}));
    CHECK(resumed.result.start_iteration == 4);
    REQUIRE(resumed.result.losses.size() == 4);
    const std::vector<double> tail(full.result.losses.begin() + 4, full.result.losses.end());
    CHECK(resumed.result.losses == tail);  // bitwise
    CHECK(resumed.params == full.params);
    fs::remove_all(dir);
  }
}
