// The MoE accounting under mpirun -np 4 (ctest mpi_moe_bias_np4): a tiny GPT whose layers are MoE
// layers with sigmoid routing and the aux-loss-free expert bias trains 10 iterations at DP2×PP2
// (the counts summed over tp×cp×dp, the load statistics gathered over pp) and matches every rank
// training alone: the same losses within 1e-6 relative, the same expert biases and the same
// per-layer tokens-per-expert counts. Its checkpoint of iteration 5 (the bias a global tensor
// written once) loads on one rank and continues with the same losses and biases.
// Reference: megatron/core/distributed/finalize_model_grads.py (_update_router_expert_bias).
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/gpt/gpt_model.h"
#include "models/layers/moe/router.h"
#include "layout_training.h"
#include "mpi_test_helpers.h"
#include "parallel/rank_grid.h"
#include "training/checkpointing/checkpoint.h"
#include "training/config/model_factory.h"
#include "training/pipeline_setup.h"
#include "training/trainer.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
using mpitest::world_comm;

constexpr int64_t kVocab = 128;

ResolvedConfig moe_config(int64_t world, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {
      "model.num_layers=4", "model.hidden_size=32", "model.num_attention_heads=4", "model.vocab_size=128",
      "model.make_vocab_size_divisible_by=64", "model.add_bias_linear=false", "model.num_experts=4",
      "model.moe_ffn_hidden_size=32", "model.moe_router_topk=2", "model.moe_router_score_function=sigmoid",
      "model.moe_router_enable_expert_bias=true", "model.moe_router_bias_update_rate=0.05",
      "model.moe_aux_loss_coeff=0.01", "model.seq_length=16", "model.max_position_embeddings=16",
      "model.hidden_dropout=0.0", "model.attention_dropout=0.0", "training.micro_batch_size=2",
      "training.global_batch_size=8", "training.train_iters=10", "logging.log_interval=100",
      "training.eval_interval=1000", "optimizer.lr_warmup_iters=2", "optimizer.lr_decay_iters=10"};
  o.insert(o.end(), extra.begin(), extra.end());
  StrataConfig cfg = StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-2\ndata:\n  mock_data: true\n", o, "moe.yaml");
  return cfg.validate(world);
}

struct MoeRun {
  std::vector<double> losses;
  std::map<int64_t, std::vector<double>> bias;    // this rank's layers
  std::map<int64_t, std::vector<double>> counts;  // the last step's counts, every layer
};

MoeRun train(const ResolvedConfig& cfg, const ParallelGroups& groups) {
  MoeRun r;
  auto inspect = [&r](Trainer& trainer, std::vector<std::unique_ptr<GPTModel>>& chunks) {
    for (auto& c : chunks)
      for (const MoeRouterRef& ref : c->moe_routers()) r.bias[ref.layer] = ref.router->expert_bias.value.to_vector();
    for (const ExpertLoadStats& s : trainer.moe_accounting()->last_stats()) r.counts[s.layer] = s.counts;
  };
  r.losses = mpitest::train_layout(cfg, groups, kVocab, /*gather_grads=*/false, inspect).losses;
  return r;
}

void check_same_losses(const char* what, const std::vector<double>& got, const std::vector<double>& want) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("iteration " << i + 1 << ": " << got[i] << " vs " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= 1e-6 * std::abs(want[i]));
  }
}

TEST_CASE("moe expert bias: DP2xPP2 equals one rank; its checkpoint resumes on one rank", "[moe_bias_np4]") {
  auto comm = world_comm();
  REQUIRE(comm->size() == 4);
  const std::vector<std::string> dp2pp2 = {"parallel.pipeline_model_parallel_size=2"};
  const ResolvedConfig c4 = moe_config(4, dp2pp2);
  const ParallelGroups g4 = build_parallel_groups(*c4.parallel, comm);
  REQUIRE(g4.tp_dp_cp.size() == 2);
  const MoeRun single = train(moe_config(1, {}), ParallelGroups::single_process());
  REQUIRE(single.bias.size() == 4);
  REQUIRE(single.counts.size() == 4);

  const fs::path dir = fs::temp_directory_path() / "strata_moe_bias_np4";
  if (g4.world.rank() == 0) fs::remove_all(dir);
  g4.world.barrier();
  std::vector<std::string> save = dp2pp2;
  save.insert(save.end(), {"checkpoint.save=" + dir.string(), "checkpoint.save_interval=5"});
  const MoeRun four = train(moe_config(4, save), g4);
  check_same_losses("DP2xPP2", four.losses, single.losses);
  REQUIRE(four.bias.size() == 2);  // this stage's two layers
  for (const auto& [layer, b] : four.bias) {
    INFO("layer " << layer);
    CHECK(b == single.bias.at(layer));
    CHECK(b != std::vector<double>(4, 0.0));
  }
  CHECK(four.counts == single.counts);  // every layer, on every rank (gathered over pp)

  // Resume the DP2xPP2 checkpoint of iteration 5 on one rank.
  if (g4.world.rank() == 0) write_checkpoint_tracker(dir.string(), 5);
  g4.world.barrier();
  const MoeRun resumed = train(moe_config(1, {"checkpoint.load=" + dir.string()}), ParallelGroups::single_process());
  check_same_losses("DP2xPP2 -> one rank", resumed.losses,
                    std::vector<double>(single.losses.begin() + 5, single.losses.end()));
  CHECK(resumed.bias == single.bias);
  g4.world.barrier();
  if (g4.world.rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
