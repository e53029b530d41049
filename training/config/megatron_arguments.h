// Megatron-LM's training arguments, as data: every argparse action of megatron/training/arguments.py
// add_megatron_arguments (with the flags ArgumentGroupFactory generates from the config classes)
// and of megatron/post_training/arguments.py add_modelopt_args,
// read from training/config/megatron_arguments.tsv, which scripts/megatron/extract_args.py writes
// from a Megatron-LM commit and CMake compiles in. The flag table (megatron_flag_table.cpp) gives
// each of them a status; docs/megatron_flags.md lists them.
#pragma once
#include <string>
#include <vector>

#include "core/megatron_flags.h"

namespace strata {

struct MegatronArgument {
  std::vector<std::string> flags;  // every "--" spelling ("--foo", "--no-foo")
  std::string dest;                // the argparse destination ("foo")
  config::FlagArity arity = config::FlagArity::One;
  std::string default_text;        // Python's default, as text ("None", "False", "['p2p']")
  std::string choices;             // comma-separated, or empty
  std::string group;               // the argparse group title, lower case
};

// Every argument, in the file's order (sorted by first flag).
const std::vector<MegatronArgument>& megatron_arguments();

// The Megatron-LM commit the list was extracted from ("d98e8a64… (2026-08-22)").
const std::string& megatron_arguments_commit();

// The argument that has `flag` among its spellings, or nullptr.
const MegatronArgument* find_megatron_argument(const std::string& flag);

// Parses the TSV text (exposed for tests); `source` names it in errors.
std::vector<MegatronArgument> parse_megatron_arguments(const std::string& text, std::string* commit,
                                                       const std::string& source);

}  // namespace strata
