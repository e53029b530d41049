// training::run: the `strata train` entry point after the config is loaded and validated — builds
// the model, data and optimizer from the config and runs the training loop (Megatron's pretrain()).
// Reference: megatron/training/training.py (pretrain).
#pragma once
#include <iosfwd>
#include <vector>

#include "training/config.h"
#include "training/trainer.h"

namespace strata::training {

// Runs training as configured; returns the process exit code (0 on success). `cfg` must be
// validated. Errors are thrown as strata::Error.
int run(const StrataConfig& cfg);

// What a caller of run_training adds to the run (`strata bench train`: a sink that records every
// iteration's time, and a quiet log stream).
struct RunHooks {
  std::vector<MetricsSink*> sinks;    // not owned; fed besides the configured sinks
  std::ostream* log_stream = nullptr;  // null: std::cout
};

// run() returning the trainer's result (losses, grad norms, ...) instead of the exit code.
TrainResult run_training(const StrataConfig& cfg, const RunHooks& hooks = {});

}  // namespace strata::training
