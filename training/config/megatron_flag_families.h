// Building blocks of the Megatron flag table (megatron_flag_table.cpp): a status for a family of
// Megatron-LM flags at once, each flag's arity (switch, one value, a list) taken from Megatron's
// own argument list (megatron_arguments.h), so a flag is consumed with its values exactly as
// Megatron's parser would, and a misspelt flag is an internal error at startup, not a silent gap.
//   refused        a capability Strata lacks: the flag is an error naming it (and the alternative)
//   without_effect Megatron's implementation choice: the same numbers in Strata; accepted, logged once
//   accepted_values without effect for the values that name what Strata does; others refused by name
// The family files group Megatron's flags by what they are for:
//   megatron_flags_model.cpp       transformer configuration, network size, MoE, MLA, mixed precision
//   megatron_flags_run.cpp         training, checkpointing, distributed, data, logging, tokenizer
//   megatron_flags_out_of_scope.cpp RL, inference serving, vision, retrieval, distillation, SFT, fault
//                                   tolerance, external services, ModelOpt post-training
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "core/megatron_flags.h"

namespace strata::megatron_flags {

using Rules = std::vector<config::MegatronFlagRule>;

// Every flag refused: "not supported by Strata: <capability>".
Rules refused(const std::string& capability, std::initializer_list<const char*> flags);
// Every flag accepted and reported once as selecting `what`, with no effect on Strata's numbers.
Rules without_effect(const std::string& what, std::initializer_list<const char*> flags);
// One flag accepted only with one of `values` (joined by spaces); any other value is refused.
config::MegatronFlagRule accepted_values(const char* flag, const std::string& what, std::vector<std::string> values);

// Appends `more` to `rules`.
void append(Rules& rules, Rules more);

Rules model_flag_rules();        // megatron_flags_model.cpp
Rules run_flag_rules();          // megatron_flags_run.cpp
Rules out_of_scope_flag_rules(); // megatron_flags_out_of_scope.cpp

}  // namespace strata::megatron_flags
