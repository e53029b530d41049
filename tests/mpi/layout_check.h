// Layout equivalence under mpirun, shared by the combined-layout and expert-parallel tests: every
// rank first trains the single-rank baseline locally (ParallelGroups::single_process(), no
// communication), then its part of the layout (the real groups, build_parallel_groups() over
// MPI_COMM_WORLD), and checks the 10 losses and grad norms within 1e-5 relative of the baseline's,
// and after step 1 every parameter's gradient (distributed-optimizer shards all-gathered, tp shards
// gathered) within 1e-5 relative to the tensor's largest entry; each parameter lives on exactly
// one pipeline stage and each expert on one expert-parallel rank.
// Model: GPT, 4 layers, hidden 32, 4 heads, vocab 128, seq 16, hidden and attention dropout 0.1,
// f32, micro-batch 2, global batch 8.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "layout_training.h"
#include "mpi_test_helpers.h"
#include "parallel/rank_grid.h"
#include "training/config/config.h"

namespace strata::mpitest {

inline constexpr int64_t kVocab = 128;
inline constexpr int kSteps = 10;

inline ResolvedConfig layout_config(const std::vector<std::string>& extra, int64_t world) {
  std::vector<std::string> o = {"model.num_layers=4",           "model.hidden_size=32",
                                "model.num_attention_heads=4",  "model.vocab_size=128",
                                "model.make_vocab_size_divisible_by=8",
                                "model.hidden_dropout=0.1",     "model.attention_dropout=0.1",
                                "model.seq_length=16",          "model.max_position_embeddings=16",
                                "training.micro_batch_size=2",  "training.global_batch_size=8",
                                "training.train_iters=10",      "logging.log_interval=100",
                                "training.eval_interval=1000",  "optimizer.lr_warmup_iters=2",
                                "optimizer.lr_decay_iters=10",  "optimizer.weight_decay=0.1"};
  o.insert(o.end(), extra.begin(), extra.end());
  const StrataConfig cfg =
      StrataConfig::from_yaml_text("optimizer:\n  lr: 1.0e-2\ndata:\n  mock_data: true\n", o, "layouts.yaml");
  return cfg.validate(world);
}

struct RunResult {
  std::vector<double> losses, grad_norms;
  std::map<std::string, std::vector<double>> grads;  // global gradients at the end, by name (shared copies left out)
};

// Trains `cfg` with this rank's part of the layout in `groups`, as training/run.cpp does.
inline RunResult train(const ResolvedConfig& cfg, const ParallelGroups& groups) {
  LayoutRun t = train_layout(cfg, groups, kVocab);
  RunResult r;
  r.losses = t.losses;
  r.grad_norms = t.grad_norms;
  for (auto& [name, g] : t.grads) r.grads[name] = g.to_vector();
  return r;
}

// `layout`: config overrides; the parallel.* ones apply to the layout run only, the rest to both.
// baseline (optional): the single-rank run's overrides instead (a hybrid pattern without its '|').
// grad_floor: the absolute gradient scale below which errors count as absolute (relative_error's
// floor; mHC's 1-element alpha gradients are sums over every token with heavy cancellation).
inline void check_layout(const std::vector<std::string>& layout, int expected_world,
                         const std::vector<std::string>* baseline = nullptr, double grad_floor = 1e-6) {
  const int world = mpitest::world().size();
  REQUIRE(world == expected_world);
  const ResolvedConfig cfg = layout_config(layout, world);
  const ParallelGroups groups = build_parallel_groups(*cfg.parallel, mpitest::world_comm());
  std::vector<std::string> one = layout;
  one.push_back("training.train_iters=1");
  const ResolvedConfig cfg1 = layout_config(one, world);
  // The baseline: the same run without the parallel.* settings, on one rank.
  std::vector<std::string> base_opts;
  for (const auto& s : layout)
    if (s.rfind("parallel.", 0) != 0) base_opts.push_back(s);
  if (baseline) base_opts = *baseline;
  std::vector<std::string> base_one = base_opts;
  base_one.push_back("training.train_iters=1");

  const RunResult base = train(layout_config(base_opts, 1), ParallelGroups::single_process());
  const RunResult base1 = train(layout_config(base_one, 1), ParallelGroups::single_process());
  const RunResult par = train(cfg, groups);
  const RunResult par1 = train(cfg1, groups);

  REQUIRE(base.losses.size() == static_cast<size_t>(kSteps));
  REQUIRE(par.losses.size() == base.losses.size());
  double worst_loss = 0.0;
  for (size_t i = 0; i < base.losses.size(); ++i) {
    const double e = std::abs(par.losses[i] - base.losses[i]) / std::abs(base.losses[i]);
    worst_loss = std::max(worst_loss, e);
    INFO("step " << i + 1 << ": layout " << par.losses[i] << " single " << base.losses[i] << ", grad norm "
                 << par.grad_norms[i] << " vs " << base.grad_norms[i]);
    CHECK(e <= 1e-5);
    CHECK(std::abs(par.grad_norms[i] - base.grad_norms[i]) <= 1e-5 * std::abs(base.grad_norms[i]));
  }
  CHECK(base.grad_norms.front() > 0.0);

  double worst_grad = 0.0;
  for (const auto& [name, g] : par1.grads) {
    INFO(name);
    REQUIRE(base1.grads.count(name) == 1);
    const double e = relative_error(g, base1.grads.at(name), grad_floor);
    worst_grad = std::max(worst_grad, e);
    CHECK(e <= 1e-5);
  }
  // Every parameter lives on exactly one pipeline stage; every expert on one expert-parallel rank.
  int64_t experts = 0;
  for (const auto& [name, g] : par1.grads) experts += name.find(".experts.") != std::string::npos ? 1 : 0;
  if (groups.expert_tp.rank() != 0) experts = 0;  // the expert-tp shards of one expert count once
  int64_t local_experts = 0;
  for (const auto& [name, g] : par1.grads) local_experts += name.find(".experts.") != std::string::npos ? 1 : 0;
  Tensor dense =
      Tensor::full({1}, static_cast<double>(par1.grads.size()) - static_cast<double>(local_experts), DType::I64);
  Tensor expert = Tensor::full({1}, static_cast<double>(experts), DType::I64);
  groups.pp.all_reduce(dense);
  groups.pp.all_reduce(expert);
  groups.tp_ep.all_reduce(expert);
  CHECK(static_cast<size_t>(dense.item() + expert.item()) == base1.grads.size());

  // The worst errors over every rank, printed once.
  Tensor worst = Tensor::from_vector({worst_loss, worst_grad}, {2}, DType::F64);
  mpitest::world().all_reduce(worst, ReduceOp::Max);
  if (groups.global_rank == 0) {
    std::string name;
    for (const auto& s : layout) name += " " + s.substr(s.find('.') + 1);
    std::printf("  combined layout%s: worst loss relative error %.3g (10 steps), gradient relative error %.3g (step 1)\n",
                name.c_str(), worst.to_vector()[0], worst.to_vector()[1]);
  }
}

}  // namespace strata::mpitest
