// Megatron-Core's own checkpoints resumed by Strata (training/checkpointing/megatron/): each
// fixture of tests/fixtures/megatron_ckpt (written by Megatron-Core 0.19.2 on a CPU after two
// steps, with the batches and losses it recorded) is loaded with Megatron's own command line read
// by Strata's flag parser; the forward loss on Megatron's check batch must be the loss Megatron
// recorded, and three more steps on Megatron's batches must give Megatron's continued losses.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/unit/megatron_fixture_support.h"
#include "training/checkpointing/megatron/megatron_legacy_read.h"
#include "training/checkpointing/megatron/megatron_names.h"
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

void check_against_megatron(const std::string& c, const std::string& variant, const ResumeResult& got,
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

// Saved by Megatron under tp 2 (each mp_rank file a shard: QKV/fc1 by rows, SwiGLU's [gate_r; up_r]
// as two pieces, linear_proj/fc2 by columns, the vocabulary padded to 256) and pp 2 (the second
// stage's layer 0 is layer 1); Strata resumes both on one rank (tp 1, pp 1).
TEST_CASE("Megatron legacy checkpoints saved under tp 2 or pp 2 resume on one rank with Megatron's losses",
          "[megatron_ckpt]") {
  check_against_megatron("llama_mp", "torch_tp2",
                         resume_megatron_fixture("llama_mp", "torch_tp2",
                                                 {"parallel.tensor_model_parallel_size=1",
                                                  "model.make_vocab_size_divisible_by=256"}));
  check_against_megatron("llama_mp", "torch_pp2",
                         resume_megatron_fixture("llama_mp", "torch_pp2", {"parallel.pipeline_model_parallel_size=1"}),
                         /*check_loss=*/false);  // Megatron's pipelined model has no one-rank forward
}

TEST_CASE("Megatron legacy checkpoint errors name the file", "[megatron_ckpt]") {
  namespace fs = std::filesystem;
  const fs::path src = megatron_fixture_dir("llama") / "torch" / "iter_0000002";
  const fs::path tmp = fs::temp_directory_path() / ("strata_legacy_errors_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const fs::path rank = tmp / "iter_0000002" / "mp_rank_00";
  fs::create_directories(rank);
  const fs::path pt = rank / "model_optim_rng.pt";
  {  // a truncated copy: the zip's central directory is gone
    std::ifstream in(src / "mp_rank_00" / "model_optim_rng.pt", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(pt, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  CHECK(detect_checkpoint_format((tmp / "iter_0000002").string()) == CheckpointFormat::MegatronTorch);
  CHECK_THROWS_WITH(read_megatron_legacy((tmp / "iter_0000002").string(), {}),
                    Catch::Contains(pt.string()) && Catch::Contains("truncated"));
  // The args say tp 2 (llama_mp's torch_tp2), but only mp_rank_00 is there.
  fs::remove_all(tmp / "iter_0000002");
  fs::create_directories(rank);
  fs::copy_file(megatron_fixture_dir("llama_mp") / "torch_tp2" / "iter_0000002" / "mp_rank_00" / "model_optim_rng.pt", pt);
  CHECK_THROWS_WITH(read_megatron_legacy((tmp / "iter_0000002").string(), {}),
                    Catch::Contains((tmp / "iter_0000002" / "mp_rank_01" / "model_optim_rng.pt").string()) &&
                        Catch::Contains("is missing"));
  fs::remove_all(tmp);
}

TEST_CASE("Megatron tensor names become Strata's", "[megatron_ckpt]") {
  CHECK(megatron_key_to_strata_name("decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight") ==
        "decoder.layers.1.mlp.experts.linear_fc1.weight3");
  CHECK(megatron_key_to_strata_name("decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.bias", 4) ==
        "decoder.layers.1.mlp.experts.linear_fc2.bias7");
  CHECK(megatron_key_to_strata_name("decoder.layers.0.mlp.experts.linear_fc1.weight1", 2) ==
        "decoder.layers.0.mlp.experts.linear_fc1.weight3");
  CHECK(megatron_key_to_strata_name("mtp.layers.0.mtp_model_layer.mlp.linear_fc2.weight") ==
        "mtp.layers.0.transformer_layer.mlp.linear_fc2.weight");
  const std::set<std::string> te = {"decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
                                    "decoder.layers.0.mlp.linear_fc1.layer_norm_weight"};
  const std::set<std::string> separate = {"decoder.layers.0.input_layernorm.weight",
                                          "decoder.layers.0.pre_mlp_layernorm.weight"};
  CHECK(resolve_megatron_norm_alias("decoder.layers.0.input_layernorm.weight", te) == *te.rbegin());
  CHECK(resolve_megatron_norm_alias("decoder.layers.0.pre_mlp_layernorm.weight", te) == *te.begin());
  CHECK(resolve_megatron_norm_alias("decoder.layers.0.mlp.linear_fc1.layer_norm_weight", separate) ==
        "decoder.layers.0.pre_mlp_layernorm.weight");
  CHECK(resolve_megatron_norm_alias("decoder.layers.0.mlp.linear_fc1.layer_norm_weight", te) ==
        "decoder.layers.0.mlp.linear_fc1.layer_norm_weight");
  CHECK(resolve_megatron_norm_alias("decoder.final_layernorm.weight", te) == "decoder.final_layernorm.weight");
  StoredTensorTable table;
  table["decoder.layers.0.mlp.linear_fc1.layer_norm_weight"].shape = {4};
  table["optimizer.exp_avg.decoder.layers.0.mlp.linear_fc1.layer_norm_weight"].shape = {4};
  resolve_megatron_norm_aliases(table, separate);
  CHECK(table.count("decoder.layers.0.pre_mlp_layernorm.weight") == 1);
  CHECK(table.count("optimizer.exp_avg.decoder.layers.0.pre_mlp_layernorm.weight") == 1);
  CHECK(table.size() == 2);
}
