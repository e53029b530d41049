// A checkpoint's model against this run's: the architecture fields (models/config/model_config.h
// architecture_field_names) of the config saved in the checkpoint's manifest compared with this
// run's, before any tensor is read. A resume (not checkpoint.finetune) into a model that differs in
// any of them is refused, naming each field with both values; a finetune lists them and goes on
// (it loads the tensors the two models share: training/checkpointing/checkpoint.h).
// Reference: megatron/training/checkpointing.py (load_checkpoint: check_checkpoint_args compares
// num_layers, hidden_size, num_attention_heads, … of the saved args with the run's).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "training/config/config.h"

namespace strata {

// The config YAML saved in <load_dir>/iter_<iteration>/manifest.json ("config"); empty when the
// manifest has none. A missing or unreadable manifest is an error naming the file.
std::string read_checkpoint_config(const std::string& load_dir, int64_t iteration);

// "model.<field>: the checkpoint has A, this run B" for each architecture field that differs. A
// field the saved config does not have (written before the field existed) is compared as its
// default; a field still null in this run (model.vocab_size before the tokenizer) is skipped.
// `saved_config_yaml` is not empty.
std::vector<std::string> architecture_differences(const std::string& saved_config_yaml, const ResolvedConfig& cfg);

// The rule above: throws config::ConfigError("checkpoint.load", …) listing every difference unless
// cfg.checkpoint->finetune; returns the differences (a finetune's, to be logged). A manifest without
// a config cannot be checked: refused unless checkpoint.finetune (returned as a difference) or
// checkpoint.allow_unchecked_architecture (the user vouches for it; tensor shapes are still checked).
std::vector<std::string> check_checkpoint_architecture(const std::string& load_dir, int64_t iteration,
                                                       const ResolvedConfig& cfg);

}  // namespace strata
