// Resharding sharded checkpoints under mpirun -np 4 (ctest mpi_ckpt_np4): a tiny GPT (f32, hidden
// and attention dropout on, SwiGLU so fc1 shards are two pieces, tied embeddings so the last stage
// holds a shared copy) trained at TP2×PP2 saves a checkpoint at iteration 5 while running 10
// iterations; the checkpoint then loads at TP1×PP1 (every rank alone), at DP2 and at DP2 with the
// distributed optimizer (two DP2 jobs of ranks {0,1} and {2,3}), and each continues with the
// uninterrupted run's losses for iterations 6–10 within 1e-6 relative. And back: checkpoints saved
// at TP1×PP1 and at DP2 with the distributed optimizer load at TP2×PP2 and continue with their
// source run's losses. Also: the TP2×PP2 manifest lists fc1 as pieces and writes replicas once.
// MoE: saved at EP2×TP2, loaded at EP1 and EP4. Hybrid MoE + MTP ('/' depths, the nested
// mtp.layers.K.mtp_model_layer.layers.J names): saved at TP2×PP2 (SP), loaded at TP1×PP1.
// Reference: megatron/core/dist_checkpointing (save/load with a different parallel layout).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/gpt/gpt_model.h"
#include "layout_training.h"
#include "mpi_test_helpers.h"
#include "parallel/mpi_communicator.h"
#include "parallel/rank_grid.h"
#include "trainer_test_support.h"
#include "training/checkpointing/checkpoint.h"
#include "training/pipeline_setup.h"
#include "training/trainer.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kVocab = 128;

using mpitest::world_comm;

// The config of a layout on `world` ranks; vocab padding 64·tp gives 128 rows at tp 1 and 2, so
// every layout has the same global model.
ResolvedConfig gpt_config(int64_t world, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {
      "model.num_layers=4", "model.hidden_size=32", "model.num_attention_heads=4", "model.vocab_size=128",
      "model.make_vocab_size_divisible_by=64", "model.swiglu=true", "model.ffn_hidden_size=64",
      "model.hidden_dropout=0.1", "model.attention_dropout=0.1", "model.seq_length=16",
      "model.max_position_embeddings=16", "training.micro_batch_size=2", "training.global_batch_size=8",
      "training.train_iters=10", "logging.log_interval=100", "training.eval_interval=1000",
      "optimizer.lr_warmup_iters=2", "optimizer.lr_decay_iters=10", "optimizer.weight_decay=0.1"};
  o.insert(o.end(), extra.begin(), extra.end());
  const StrataConfig cfg =
      StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-2\ndata:\n  mock_data: true\n", o, "reshard.yaml");
  return cfg.validate(world);
}

// The groups of cfg's layout over `comm` (the world, or a sub-job of it).
ParallelGroups groups_for(const ResolvedConfig& cfg, const std::shared_ptr<Communicator>& comm) {
  return build_parallel_groups(*cfg.parallel, comm);
}

std::vector<double> train(const ResolvedConfig& cfg, const ParallelGroups& groups) {
  return mpitest::train_layout(cfg, groups, kVocab, /*gather_grads=*/false).losses;
}

const std::vector<std::string> kTP2PP2 = {"parallel.tensor_model_parallel_size=2",
                                          "parallel.pipeline_model_parallel_size=2"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

double worst_rel = 0.0;

// Losses of iterations 6–10 of a resumed run against the source run's.
void check_continues(const char* what, const std::vector<double>& resumed, const std::vector<double>& source) {
  INFO(what);
  REQUIRE(source.size() == 10);
  REQUIRE(resumed.size() == 5);
  for (size_t i = 0; i < 5; ++i) {
    const double want = source[5 + i], rel = std::abs(resumed[i] - want) / std::abs(want);
    worst_rel = std::max(worst_rel, rel);
    INFO("iteration " << 6 + i << ": " << resumed[i] << " vs " << want);
    CHECK(rel <= 1e-6);
  }
}

fs::path fresh_shared_dir(const std::string& name, const ProcessGroup& world) {
  const fs::path dir = fs::temp_directory_path() / ("strata_reshard_" + name);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  return dir;
}

// Point the tracker at iteration 5 (the run also saved 10), visible to every rank.
void track_iteration_5(const fs::path& dir, const ProcessGroup& world) {
  if (world.rank() == 0) write_checkpoint_tracker(dir.string(), 5);
  world.barrier();
}

TEST_CASE("checkpoint reshard: TP2xPP2 -> TP1xPP1, DP2, DP2 + distributed optimizer", "[ckpt_reshard]") {
  auto comm = world_comm();
  REQUIRE(comm->size() == 4);
  const ResolvedConfig c4 = gpt_config(4, kTP2PP2);
  const ParallelGroups g4 = groups_for(c4, comm);
  const fs::path dir = fresh_shared_dir("from_tp2pp2", g4.world);
  const std::vector<double> source =
      train(gpt_config(4, with(kTP2PP2, {"checkpoint.save=" + dir.string(), "checkpoint.save_interval=5"})), g4);
  REQUIRE(source.size() == 10);
  track_iteration_5(dir, g4.world);

  // The manifest: fc1 of layer 0 (stage 0) is four pieces (two tp ranks × gate/up blocks), the final
  // norm (stage 1, replicated over tp) one piece, written by one rank; no shared copy written.
  if (g4.world.rank() == 0) {
    std::ifstream in(dir / "iter_0000005" / "manifest.json");
    const nlohmann::json m = nlohmann::json::parse(in);
    CHECK(m["version"] == 2);
    CHECK(m["saved_world_size"] == 4);
    CHECK(m["tensors"]["decoder.layers.0.mlp.linear_fc1.weight"]["pieces"].size() == 4);
    CHECK(m["tensors"]["decoder.layers.0.mlp.linear_fc1.weight"]["shape"] == nlohmann::json({128, 32}));
    CHECK(m["tensors"]["decoder.layers.3.mlp.linear_fc1.weight"]["pieces"].size() == 4);
    CHECK(m["tensors"]["decoder.final_layernorm.weight"]["pieces"].size() == 1);
    CHECK(m["tensors"]["embedding.word_embeddings.weight"]["pieces"].size() == 2);
    CHECK(m["tensors"]["optimizer.exp_avg.embedding.word_embeddings.weight"]["pieces"].size() == 2);
    CHECK_FALSE(m["tensors"].contains("output_layer.weight"));
  }

  // TP1×PP1: every rank alone.
  const std::vector<double> single =
      train(gpt_config(1, {"checkpoint.load=" + dir.string()}), ParallelGroups::single_process());
  check_continues("TP1xPP1", single, source);
  // DP2 (two jobs: ranks {0,1} and {2,3}), without and with the distributed optimizer.
  auto half = comm->split(comm->rank() / 2, comm->rank());
  for (const char* distopt : {"false", "true"}) {
    const ResolvedConfig c2 = gpt_config(2, {"checkpoint.load=" + dir.string(),
                                             std::string("parallel.use_distributed_optimizer=") + distopt});
    const std::vector<double> dp = train(c2, groups_for(c2, half));
    check_continues(distopt[0] == 't' ? "DP2 + distributed optimizer" : "DP2", dp, source);
  }
  g4.world.barrier();
  if (g4.world.rank() == 0) {
    fs::remove_all(dir);
    std::printf("  checkpoint reshard from TP2xPP2: worst loss relative error %.3g\n", worst_rel);
  }
}

TEST_CASE("checkpoint reshard: TP1xPP1 and DP2 + distributed optimizer -> TP2xPP2", "[ckpt_reshard]") {
  auto comm = world_comm();
  REQUIRE(comm->size() == 4);
  const ResolvedConfig c4 = gpt_config(4, kTP2PP2);
  const ParallelGroups g4 = groups_for(c4, comm);

  // Saved by one process (rank 0; the others run the same job without saving).
  const fs::path d1 = fresh_shared_dir("from_tp1", g4.world);
  std::vector<std::string> o1;
  if (g4.world.rank() == 0) o1 = {"checkpoint.save=" + d1.string(), "checkpoint.save_interval=5"};
  const std::vector<double> src1 = train(gpt_config(1, o1), ParallelGroups::single_process());
  g4.world.barrier();
  track_iteration_5(d1, g4.world);
  check_continues("TP1xPP1 -> TP2xPP2", train(gpt_config(4, with(kTP2PP2, {"checkpoint.load=" + d1.string()})), g4),
                  src1);

  // Saved by the DP2 job of ranks {0,1} with the distributed optimizer.
  const fs::path d2 = fresh_shared_dir("from_dp2", g4.world);
  auto half = comm->split(comm->rank() / 2, comm->rank());
  std::vector<std::string> o2 = {"parallel.use_distributed_optimizer=true"};
  if (comm->rank() < 2) o2 = with(o2, {"checkpoint.save=" + d2.string(), "checkpoint.save_interval=5"});
  const ResolvedConfig c2 = gpt_config(2, o2);
  const std::vector<double> src2 = train(c2, groups_for(c2, half));
  g4.world.barrier();
  track_iteration_5(d2, g4.world);
  check_continues("DP2 + distributed optimizer -> TP2xPP2",
                  train(gpt_config(4, with(kTP2PP2, {"checkpoint.load=" + d2.string()})), g4), src2);
  g4.world.barrier();
  if (g4.world.rank() == 0) {
    fs::remove_all(d1);
    fs::remove_all(d2);
    std::printf("  checkpoint reshard to TP2xPP2: worst loss relative error %.3g\n", worst_rel);
  }
}

// Experts: saved at EP2 × TP2 (expert_tensor_parallel_size 1, sequence parallel, distributed
// optimizer), each expert written once under its global id by expert-dp rank 0; resumed at EP1
// (every rank alone) and at EP4 × DP4 with the source run's losses.
TEST_CASE("checkpoint reshard: MoE EP2xTP2 -> EP1, EP4", "[ckpt_reshard]") {
  auto comm = world_comm();
  REQUIRE(comm->size() == 4);
  const std::vector<std::string> moe = {"model.add_bias_linear=false", "model.num_experts=8",
                                        "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2",
                                        "model.moe_aux_loss_coeff=0.01", "model.moe_layer_freq=[0, 1, 1, 0]",
                                        "model.moe_token_dispatcher_type=alltoall"};
  const std::vector<std::string> ep2tp2 = {"parallel.expert_model_parallel_size=2",
                                           "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true",
                                           "parallel.expert_tensor_parallel_size=1",
                                           "parallel.use_distributed_optimizer=true"};
  const ResolvedConfig c4 = gpt_config(4, with(moe, ep2tp2));
  const ParallelGroups g4 = groups_for(c4, comm);
  const fs::path dir = fresh_shared_dir("moe_ep2tp2", g4.world);
  const std::vector<double> source = train(
      gpt_config(4, with(with(moe, ep2tp2), {"checkpoint.save=" + dir.string(), "checkpoint.save_interval=5"})), g4);
  REQUIRE(source.size() == 10);
  track_iteration_5(dir, g4.world);
  if (g4.world.rank() == 0) {
    std::ifstream in(dir / "iter_0000005" / "manifest.json");
    const nlohmann::json m = nlohmann::json::parse(in);
    for (int e = 0; e < 8; ++e) {
      const std::string w = "decoder.layers.1.mlp.experts.linear_fc1.weight" + std::to_string(e);
      INFO(w);
      REQUIRE(m["tensors"].contains(w));
      CHECK(m["tensors"][w]["pieces"].size() == 1);
      CHECK(m["tensors"]["optimizer.exp_avg." + w]["pieces"].size() == 1);
    }
    CHECK(m["tensors"]["decoder.layers.1.mlp.router.weight"]["pieces"].size() == 1);
  }
  check_continues("MoE EP2xTP2 -> EP1",
                  train(gpt_config(1, with(moe, {"checkpoint.load=" + dir.string()})), ParallelGroups::single_process()),
                  source);
  const ResolvedConfig c_ep4 =
      gpt_config(4, with(moe, {"checkpoint.load=" + dir.string(), "parallel.expert_model_parallel_size=4"}));
  check_continues("MoE EP2xTP2 -> EP4", train(c_ep4, groups_for(c_ep4, comm)), source);
  g4.world.barrier();
  if (g4.world.rank() == 0) {
    fs::remove_all(dir);
    std::printf("  checkpoint reshard MoE EP2xTP2 -> EP1, EP4: worst loss relative error %.3g\n", worst_rel);
  }
}

TEST_CASE("checkpoint reshard: hybrid MoE + MTP TP2xPP2 -> TP1xPP1 (nested MTP names)", "[ckpt_reshard]") {
  auto comm = world_comm();
  REQUIRE(comm->size() == 4);
  const std::vector<std::string> hybrid = {
      "model.hybrid_layer_pattern=\"M*|E-/M*E\"", "model.add_bias_linear=false", "model.num_experts=4",
      "model.moe_ffn_hidden_size=16", "model.moe_router_topk=2", "model.moe_aux_loss_coeff=0.01",
      "model.position_embedding_type=rope", "model.mamba_head_dim=16", "model.mamba_num_groups=2",
      "model.mamba_state_dim=8", "model.mamba_chunk_size=8"};
  const std::vector<std::string> layout = with(kTP2PP2, {"parallel.sequence_parallel=true"});
  const ResolvedConfig c4 = gpt_config(4, with(hybrid, layout));
  const ParallelGroups g4 = groups_for(c4, comm);
  const fs::path dir = fresh_shared_dir("hybrid_mtp", g4.world);
  const std::vector<double> source = train(
      gpt_config(4, with(with(hybrid, layout), {"checkpoint.save=" + dir.string(), "checkpoint.save_interval=5"})), g4);
  REQUIRE(source.size() == 10);
  track_iteration_5(dir, g4.world);
  if (g4.world.rank() == 0) {
    std::ifstream in(dir / "iter_0000005" / "manifest.json");
    const nlohmann::json m = nlohmann::json::parse(in);
    CHECK(m["tensors"]["mtp.layers.0.mtp_model_layer.layers.0.mixer.in_proj.weight"]["pieces"].size() >= 2);  // tp
    CHECK(m["tensors"].contains("mtp.layers.0.mtp_model_layer.layers.2.mlp.router.weight"));
    CHECK(m["tensors"]["mtp.layers.0.eh_proj.weight"]["pieces"].size() == 2);  // column-parallel
  }
  check_continues("hybrid MTP TP2xPP2 -> TP1xPP1",
                  train(gpt_config(1, with(hybrid, {"checkpoint.load=" + dir.string()})), ParallelGroups::single_process()),
                  source);
  g4.world.barrier();
  if (g4.world.rank() == 0) {
    fs::remove_all(dir);
    std::printf("  checkpoint reshard hybrid MTP TP2xPP2 -> TP1xPP1: worst loss relative error %.3g\n", worst_rel);
  }
}

}  // namespace
}  // namespace strata
