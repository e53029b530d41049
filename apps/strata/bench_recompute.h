// `strata bench recompute`: what activation recompute costs and saves, in one command. The same
// training run (training::run_training on the config, mock data unless it names data) under each
// recompute mode, alternated `repeat` times in a rotating order so load from other processes hits
// all alike:
//   none                 no recompute
//   full_uniform[:n]     recompute_granularity full, method uniform, n layers per chunk (default 1)
//   full_block[:n]       full, method block, the first n layers of the stage (default half of them)
//   selective:m1,m2      recompute_granularity selective, recompute_modules [m1, m2]
// For each mode: the median step time and its ratio to none (the median over repeats of the ratio
// within a repeat; the target: full ≤ 1.35), the
// allocator's peak bytes of the run and what the mode saves against none (activation memory, the
// static parameters / grads / Adam state being the same in every mode), `strata plan`'s estimate
// of the activations under that mode next to it, and whether the losses are bit-identical to none.
// --compare-config B also runs config B without recompute and prints the tokens/s ratio of the two
// configs (e.g. a hybrid model against a GPT of similar size).
// Reference: Megatron-Core recompute (transformer_block._checkpointed_forward), Korthikanti et al. 2022.
#pragma once
#include <string>
#include <vector>

#include "apps/strata/bench_train.h"

namespace strata::app {

struct BenchRecomputeOptions {
  BenchTrainOptions train;         // config, overrides, iters, warmup, repeat, json_out
  std::vector<std::string> modes;  // empty: none full_uniform full_block selective:mlp
  std::string compare_config;      // "" or a second config, run without recompute
};

// The model-section overrides of one mode name (e.g. "full_block:2"); throws naming --modes for a
// bad name. `layers`: the model's layer count (full_block's default n = max(1, layers / 2)).
std::vector<std::string> recompute_mode_overrides(const std::string& mode, int64_t layers);

// 0, or 1 when a mode's losses differ from no recompute.
int run_recompute_benchmark(const BenchRecomputeOptions& options);

}  // namespace strata::app
