// `strata bench train`: training-step throughput of the real trainer (training::run_training on
// the config, mock data unless the config gives data) — tokens/s, median and p90 step time, peak
// memory — optionally with the PyTorch eager reference of the same GPT, dense or MoE (scripts/bench/
// gpt_train_torch.py, moe_torch.py) run in the same command, back to back, from Strata's initial
// parameters and batches: the ratio of the two and the difference of their first losses.
// Reference: llm.c's train_gpt2 timing, Megatron's iteration-time.
#pragma once
#include <string>
#include <vector>

#include "training/config/config.h"

namespace strata::app {

struct BenchTrainOptions {
  std::string config;                  // YAML run config
  std::vector<std::string> overrides;  // section.field=value and Megatron flags, in order
  std::vector<std::string> own_flags;  // the subcommand's options (for "did you mean")
  int iters = 10;                      // timed steps
  int warmup = 2;                      // untimed steps first
  int repeat = 1;                      // ours + reference, back to back, this many times
  std::string reference;               // "" or "torch"
  std::string json_out;                // write the results as JSON here
  bool phases = false;                 // print the per-phase breakdown of the timed steps
  std::string python = "/usr/bin/python3";
  std::string torch_script;            // "": scripts/bench/gpt_train_torch.py of this source tree
};

// The benchmark's config: the user's with train_iters = warmup + iters, a log line every step,
// no evaluation, checkpoints or metric files; mock data when the config names none.
ResolvedConfig bench_config(const BenchTrainOptions& options);

// Returns the exit code: 0, or 1 when a run fails, an initial loss is not ≈ ln(vocab), or the
// reference's losses of the first steps differ from ours by more than 2e-3.
int run_train_benchmark(const BenchTrainOptions& options);

// Step-time statistics of one run (milliseconds).
struct StepTimes {
  double median_ms = 0, p90_ms = 0, mean_ms = 0;
};
// Median (upper middle for an even count) and p90 (nearest rank) of `ms`; empty → zeros.
StepTimes step_time_stats(std::vector<double> ms);


}  // namespace strata::app
