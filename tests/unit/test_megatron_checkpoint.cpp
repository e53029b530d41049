// Megatron-Core's own checkpoints resumed by Strata (training/checkpointing/megatron/): each
// fixture of tests/fixtures/megatron_ckpt (written by Megatron-Core 0.19.2 on a CPU after two
// steps, with the batches and losses it recorded) is loaded with Megatron's own command line read
// by Strata's flag parser; the forward loss on Megatron's check batch must be the loss Megatron
// recorded, and three more steps on Megatron's batches must give Megatron's continued losses.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <unistd.h>

#include "tests/unit/megatron_fixture_support.h"
#include "training/checkpointing/megatron/megatron_legacy_parts.h"
#include "training/checkpointing/megatron/megatron_legacy_read.h"
#include "training/checkpointing/megatron/megatron_names.h"
#include "training/run.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;


TEST_CASE("Megatron torch_dist and legacy torch checkpoints resume with Megatron's losses", "[megatron_ckpt]") {
  for (const auto& [c, variant] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "torch_dist"}, {"llama", "torch_dist_distopt"}, {"gpt2", "torch_dist_distopt"},
           {"moe", "torch_dist_distopt"}, {"mtp", "torch_dist_distopt"}, {"llama", "torch"}, {"llama", "torch_distopt"},
           {"gpt2", "torch"}, {"moe", "torch"}, {"mtp", "torch"}}) {
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

namespace {

// The keys of a legacy rank file's dict entry `key` (e.g. "model"), in order, without the state
// dict's `_metadata`.
std::vector<std::string> legacy_keys(const formats::PyValue& root, const std::string& key) {
  std::vector<std::string> out;
  const formats::PyValue* d = root.find(key);
  REQUIRE(d);
  const formats::PyValue& dict = d->kind == formats::PyValue::Kind::Instance && d->state ? *d->state : *d;
  for (const auto& [k, v] : dict.dict)
    if (!k->is_str() || k->text != "_metadata")  // module versions (all 1), which Strata does not write
      out.push_back(k->is_str() ? k->text : std::to_string(k->integer));
  return out;
}

// The 'params' index lists of a legacy rank file's plain optimizer.
std::vector<std::vector<int64_t>> legacy_group_indices(const formats::PyValue& root) {
  std::vector<std::vector<int64_t>> out;
  for (const formats::PyRef& g : root.find("optimizer")->find("param_groups")->items) {
    out.emplace_back();
    for (const formats::PyRef& i : g->find("params")->items) out.back().push_back(i->integer);
  }
  return out;
}

}  // namespace

TEST_CASE("a checkpoint Strata saves as legacy torch resumes with Megatron's losses", "[megatron_ckpt]") {
  // Strata resumes Megatron's iteration-2 legacy checkpoint, trains step 3 and saves it with
  // ckpt_format torch; the save must hold what Megatron-Core wrote (the same model keys in the
  // same order, the same optimizer indices, the same flat bucket size), and a second run resuming
  // from it must continue with Megatron's losses for steps 4 and 5.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("strata_mlw_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  for (const auto& [c, variant] : std::vector<std::pair<std::string, std::string>>{
           {"llama", "torch"}, {"llama", "torch_distopt"}, {"gpt2", "torch"}, {"moe", "torch"}, {"mtp", "torch"}}) {
    CAPTURE(c, variant);
    const std::filesystem::path save = dir / (c + "_" + variant);
    resume_megatron_fixture(c, variant,
                            {"training.exit_interval=3", "checkpoint.save=" + save.string(), "checkpoint.save_interval=3",
                             "checkpoint.ckpt_format=torch"});
    const std::filesystem::path rank = save / "iter_0000003" / "mp_rank_00";
    REQUIRE(std::filesystem::exists(rank / "model_optim_rng.pt"));
    REQUIRE(std::filesystem::exists(rank / "distrib_optim.pt") == (variant == "torch_distopt"));
    const std::filesystem::path theirs = megatron_fixture_dir(c) / variant / "iter_0000002";
    const formats::PyRef mine_root = read_megatron_legacy_common((save / "iter_0000003").string());
    const formats::PyRef their_root = read_megatron_legacy_common(theirs.string());
    CHECK(legacy_keys(*mine_root, "model") == legacy_keys(*their_root, "model"));
    CHECK(mine_root->find("iteration")->integer == 3);
    CHECK(mine_root->find("checkpoint_version")->as_double() == 3.0);
    if (variant == "torch") {
      CHECK(legacy_keys(*mine_root->find("optimizer"), "state") == legacy_keys(*their_root->find("optimizer"), "state"));
      CHECK(legacy_group_indices(*mine_root) == legacy_group_indices(*their_root));
    } else {
      megatron_legacy::TorchFile mine((rank / "distrib_optim.pt").string());
      megatron_legacy::TorchFile their((theirs / "mp_rank_00" / "distrib_optim.pt").string());
      const auto numel = [](const formats::PyValue& root) {
        return root.dict.at(1).second->dict.at(0).second->find("numel_unpadded")->integer;
      };
      CHECK(numel(*mine.archive.root) == numel(*their.archive.root));
    }
    const MegatronRecord rec(c);
    const auto want = rec.continued_losses(variant);
    const ResumeResult again = resume_megatron_fixture(c, variant, {"checkpoint.load=" + save.string()}, 3);
    REQUIRE(again.losses.size() == 2);
    CHECK(again.losses[0] == Approx(want.at(4)).epsilon(2e-6));
    CHECK(again.losses[1] == Approx(want.at(5)).epsilon(2e-6));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a legacy torch save the local spec has no form for is refused before training", "[megatron_ckpt]") {
  std::vector<std::string> args = MegatronRecord("moe").argv("torch");
  args.push_back("data.mock_data=true");
  args.push_back("checkpoint.save=" + (std::filesystem::temp_directory_path() / "strata_mlw_unused").string());
  CHECK_NOTHROW(StrataConfig::load("", args).validate());
  args.push_back("parallel.use_distributed_optimizer=true");
  CHECK_THROWS_WITH(StrataConfig::load("", args).validate(),
                    Catch::Contains("checkpoint.ckpt_format") && Catch::Contains("use_distributed_optimizer"));
}

// For scripts/megatron/checkpoint_fixtures/check_strata_into_megatron.sh (not run by ctest): Strata
// trains case $STRATA_MEGATRON_CASE from its own initialisation on Megatron's recorded batches for
// steps 1-5, saving iteration 2 under $STRATA_MEGATRON_EXPORT_DIR in the format of variant
// $STRATA_MEGATRON_VARIANT (torch_dist[_distopt]: torch_dist; torch[_distopt]: the legacy format),
// and prints its losses of steps 3-5 as JSON; Megatron-Core then loads that checkpoint and must
// continue with them.
TEST_CASE("export a Strata-trained Megatron checkpoint for Megatron", "[.megatron_export]") {
  const char* out = std::getenv("STRATA_MEGATRON_EXPORT_DIR");
  const char* c = std::getenv("STRATA_MEGATRON_CASE");
  REQUIRE(out);
  const std::string name = c ? c : "llama";
  const std::string variant = std::getenv("STRATA_MEGATRON_VARIANT") ? std::getenv("STRATA_MEGATRON_VARIANT") : "torch_dist";
  const MegatronRecord rec(name);
  std::vector<std::string> args = rec.argv(variant);
  for (const std::string& o : {std::string("training.exit_interval=5"), std::string("data.mock_data=true"),
                               std::string("checkpoint.save=") + out, std::string("checkpoint.save_interval=2"),
                               std::string("checkpoint.ckpt_format=") + (variant.rfind("torch_dist", 0) == 0 ? "torch_dist" : "torch"),
                               std::string("training.eval_iters=1")})
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

TEST_CASE("Strata's tensor names become Megatron's local-spec keys", "[megatron_ckpt]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"decoder.layers.1.self_attention.linear_qkv.layer_norm_weight", "decoder.layers.1.input_layernorm.weight"},
      {"decoder.layers.1.mlp.linear_fc1.layer_norm_bias", "decoder.layers.1.pre_mlp_layernorm.bias"},
      {"decoder.layers.0.mlp.experts.linear_fc1.weight3", "decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight"},
      {"decoder.layers.0.mlp.experts.linear_fc2.bias12", "decoder.layers.0.mlp.experts.local_experts.12.linear_fc2.bias"},
      {"mtp.layers.0.transformer_layer.self_attention.linear_qkv.layer_norm_weight",
       "mtp.layers.0.mtp_model_layer.input_layernorm.weight"},
      {"mtp.layers.0.transformer_layer.mlp.experts.linear_fc1.weight1",
       "mtp.layers.0.mtp_model_layer.mlp.experts.local_experts.1.linear_fc1.weight"},
      {"decoder.layers.0.mlp.router.weight", "decoder.layers.0.mlp.router.weight"},
      {"mtp.layers.0.eh_proj.weight", "mtp.layers.0.eh_proj.weight"},
      {"output_layer.weight", "output_layer.weight"}};
  for (const auto& [strata_name, key] : cases) {
    CAPTURE(strata_name);
    CHECK(strata_name_to_megatron_local_key(strata_name) == key);
    // The readers' renaming (norms resolved against the TE spelling Strata uses) inverts it.
    CHECK(resolve_megatron_norm_alias(megatron_key_to_strata_name(key), {strata_name}) == strata_name);
  }
  CHECK_THROWS_WITH(strata_name_to_megatron_local_key("decoder.layers.0.self_attention.linear_q_up_proj.layer_norm_weight"),
                    Catch::Contains("has no module in Megatron's local spec"));
}

TEST_CASE("Megatron's load flags on a Megatron checkpoint: use_checkpoint_args, finetune, no_load_optim",
          "[megatron_ckpt]") {
  const MegatronRecord rec("llama");
  SECTION("--use-checkpoint-args takes the architecture from the saved args") {
    // A command line with another width and depth: the checkpoint's args win, and the resume matches.
    check_against_megatron("llama", "torch_dist",
                           resume_megatron_fixture("llama", "torch_dist",
                                                   {"--hidden-size", "64", "--num-layers", "3", "--ffn-hidden-size",
                                                    "128", "--use-checkpoint-args"}));
  }
  SECTION("without it another architecture is refused before anything is allocated") {
    CHECK_THROWS_WITH(resume_megatron_fixture("llama", "torch_dist", {"--hidden-size", "64"}),
                      Catch::Contains("model.hidden_size") && Catch::Contains("32") && Catch::Contains("64"));
  }
  SECTION("--finetune loads the weights only and starts at iteration 0") {
    const ResumeResult r = resume_megatron_fixture("llama", "torch_dist", {"--finetune"}, 0);
    CHECK(r.check_loss == Approx(rec.loss_at_checkpoint()).epsilon(2e-6));
  }
  SECTION("--no-load-optim keeps the weights and the iteration but starts Adam afresh") {
    const ResumeResult r = resume_megatron_fixture("llama", "torch_dist", {"--no-load-optim"});
    CHECK(r.check_loss == Approx(rec.loss_at_checkpoint()).epsilon(2e-6));
    const auto want = rec.continued_losses("torch_dist");
    CHECK(r.losses.at(0) == Approx(want.at(3)).epsilon(2e-6));  // step 3's forward is the loaded weights'
    CHECK(std::abs(r.losses.at(1) - want.at(4)) > 1e-4);         // then fresh moments move differently
  }
  SECTION("--ckpt-format torch with a torch_dist checkpoint needs --auto-detect-ckpt-format") {
    CHECK_THROWS_WITH(resume_megatron_fixture("llama", "torch_dist", {"--ckpt-format", "torch"}),
                      Catch::Contains("auto_detect_ckpt_format"));
    check_against_megatron("llama", "torch_dist",
                           resume_megatron_fixture("llama", "torch_dist",
                                                   {"--ckpt-format", "torch", "--auto-detect-ckpt-format"}));
  }
}

namespace {

// Strata's own runs through torch_dist: an uninterrupted run against one saved at step 2 as
// torch_dist and resumed; the resumed steps must be bit-identical.
std::vector<double> train_mock(const std::vector<std::string>& model, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"model.hidden_size=32", "model.num_attention_heads=4", "model.vocab_size=64", "data.tokenizer_type=NullTokenizer",
                                   "model.seq_length=16", "model.max_position_embeddings=16",
                                   "training.micro_batch_size=2", "training.global_batch_size=4",
                                   "training.train_iters=4", "optimizer.lr=1e-2", "optimizer.lr_warmup_iters=1",
                                   "data.mock_data=true", "logging.log_interval=1", "model.hidden_dropout=0.1"};
  args.insert(args.end(), model.begin(), model.end());
  args.insert(args.end(), extra.begin(), extra.end());
  training::RunHooks hooks;
  std::ostringstream log;
  hooks.log_stream = &log;
  const TrainResult r = training::run_training(StrataConfig::load("", args).validate(), hooks);
  INFO(log.str());
  return r.losses;
}

}  // namespace

TEST_CASE("Strata runs saved as torch_dist resume bit for bit (hybrid, bf16 MoE)", "[megatron_ckpt]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("strata_mtd_rt_" + std::to_string(::getpid()));
  for (const std::vector<std::string>& model : std::vector<std::vector<std::string>>{
           {"model.hybrid_layer_pattern='*-*-'"},
           {"model.num_layers=2", "model.num_experts=4", "model.moe_router_topk=2", "model.moe_ffn_hidden_size=16",
            "training.precision=bf16", "parallel.use_distributed_optimizer=true", "model.moe_aux_loss_coeff=0.01"}}) {
    CAPTURE(model);
    std::filesystem::remove_all(dir);
    const std::vector<double> whole = train_mock(model, {});
    const std::string save = "checkpoint.save=" + dir.string();
    train_mock(model, {save, "checkpoint.save_interval=2", "training.exit_interval=2", "checkpoint.ckpt_format=torch_dist"});
    REQUIRE(std::filesystem::exists(dir / "iter_0000002" / ".metadata"));
    const std::vector<double> resumed = train_mock(model, {"checkpoint.load=" + dir.string()});
    REQUIRE(resumed.size() == 2);
    CHECK(resumed[0] == whole[2]);
    CHECK(resumed[1] == whole[3]);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a torch_dist save of a model with Mamba layers is refused by name", "[megatron_ckpt]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("strata_mtd_mamba_" + std::to_string(::getpid()));
  CHECK_THROWS_WITH(train_mock({"model.hybrid_layer_pattern='M*'", "model.mamba_head_dim=16", "model.mamba_num_groups=1",
                                "checkpoint.ckpt_format=torch_dist"},
                               {"checkpoint.save=" + dir.string()}),
                    Catch::Contains("checkpoint.ckpt_format") && Catch::Contains("Mamba"));
  std::filesystem::remove_all(dir);
}
