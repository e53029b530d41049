// The MoE half of `strata bench train --reference torch` (apps/strata/bench_train.cpp): which MoE
// options the PyTorch eager reference (scripts/bench/moe_torch.py, loaded by gpt_train_torch.py)
// models, the command-line arguments that describe them, and the initial-state file the
// reference starts from — Strata's own initial parameters (by their Megatron-Core names) and the
// training batches of every benchmarked step, so both sides compute the same first losses.
// Reference: megatron/core/transformer/moe/ (router.py, moe_utils.py, experts.py).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "training/batch_source.h"
#include "training/config/config.h"

namespace strata::app {

// Throws a config error naming the first MoE field the reference does not model (expert bias,
// group-limited routing, capacity, jitter, forced balancing, router dtype, per-layer logging,
// more than one micro-batch per step).
void check_moe_reference_applies(const ResolvedConfig& cfg);

// " --moe-experts E --moe-ffn F ..." for the reference script (empty for a dense model).
std::string moe_reference_args(const ResolvedConfig& cfg);

// Writes `path` (safetensors): every parameter under its name, and the int64 tensors
// "bench.tokens" / "bench.labels" [steps, global batch, seq] and f32 "bench.loss_mask" of steps
// 1..steps read from `source` (one micro-batch per step: check_moe_reference_applies).
void write_reference_init(const std::string& path, const std::vector<Parameter*>& params, BatchSource& source,
                          int64_t steps);

}  // namespace strata::app
