// training::run: the `strata train` entry point after the config is loaded and validated — builds
// the model, data and optimizer from the config and runs the training loop (Megatron's pretrain()).
// Reference: megatron/training/training.py (pretrain).
#pragma once
#include <functional>
#include <iosfwd>
#include <memory>
#include <vector>

#include "training/config/config.h"
#include "training/trainer.h"

namespace strata::training {

// Runs training as configured; returns the process exit code (0 on success). `cfg` must be
// validated. Errors are thrown as strata::Error.
int run(const ResolvedConfig& cfg);

// What a caller of run_training adds to the run (`strata bench train`: a sink that records every
// iteration's time, a quiet log stream, and a look at the initial parameters and the training
// batches for the PyTorch reference).
struct RunHooks {
  std::vector<MetricsSink*> sinks;    // not owned; fed besides the configured sinks
  std::ostream* log_stream = nullptr;  // null: std::cout
  // Called once before the first step with this rank's parameters (their initial values) and the
  // training batch source (a pure function of (step, micro-batch): reading it changes nothing).
  std::function<void(const std::vector<Parameter*>&, BatchSource&)> before_training;
  // Batches from the caller instead of the configured data (tests replaying another framework's
  // recorded batches): called with this rank's data-parallel rank and size.
  std::function<std::unique_ptr<BatchSource>(int64_t dp_rank, int64_t dp_size)> train_data, valid_data;
  // Called once the Trainer is built (its checkpoint loaded), before the first step.
  std::function<void(Trainer&)> with_trainer;
};

// Model FLOPs per token, forward + backward, of the model built from `params`: 6·N (parameters
// that multiply activations) + each decoder layer kind's attention products (the PaLM / Megatron
// MFU convention). `strata train` logs it; `strata bench train` reports the FLOP rate with it.
double model_flops_per_token(const ResolvedConfig& cfg, const std::vector<Parameter*>& params);

// run() returning the trainer's result (losses, grad norms, ...) instead of the exit code.
TrainResult run_training(const ResolvedConfig& cfg, const RunHooks& hooks = {});

}  // namespace strata::training
