// training::run: the `strata train` entry point after the config is loaded and validated — builds
// the model, data and optimizer from the config and runs the training loop (Megatron's pretrain()).
// Reference: megatron/training/training.py (pretrain).
#pragma once
#include "training/config.h"

namespace strata::training {

// Runs training as configured; returns the process exit code (0 on success). `cfg` must be
// validated. Errors are thrown as strata::Error.
int run(const StrataConfig& cfg);

}  // namespace strata::training
