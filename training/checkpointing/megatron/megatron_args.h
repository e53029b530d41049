// A Megatron checkpoint's saved arguments (the argparse.Namespace Megatron stores as `args`) as a
// Strata config: every architecture field (models/config/model_config.h architecture_field_names)
// that one of Megatron's flags sets (core/megatron_flags.h: the field's own flag, a rename, or a
// constant switch such as --swiglu) takes the value of that flag's attribute in the Namespace. The
// result is the checkpoint's "saved config" for the architecture check and --use-checkpoint-args
// (training/checkpointing/checkpoint_architecture.h, checkpoint_paths.h), as for Strata's own
// checkpoints.
// Reference: megatron/training/checkpointing.py (load_args_from_checkpoint, check_checkpoint_args).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/formats/py_value.h"

namespace strata {

// The saved args of a Megatron checkpoint's iteration directory (torch_dist or torch).
formats::PyRef read_megatron_args(const std::string& iteration_dir);

// A config YAML: the defaults with the architecture fields the args determine. `notes` (optional)
// gets one line per args attribute that could not be represented ("model.x: …").
std::string megatron_args_config_yaml(const formats::PyValue& args, std::vector<std::string>* notes = nullptr);

}  // namespace strata
