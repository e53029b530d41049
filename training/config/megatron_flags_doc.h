// docs/megatron_flags.md: every argument of Megatron-LM's training parser (megatron_arguments.h)
// with its status in Strata's flag table (core/megatron_flags.h, megatron_flag_table.cpp):
// implemented (the field it sets), accepted without effect (what it selects) or refused (the
// capability it needs). Generated; the unit test [megatron_flags] fails when the file differs.
#pragma once
#include <string>

namespace strata {

struct MegatronFlagCounts {
  int implemented = 0, accepted = 0, refused = 0, unknown = 0;
};

// Per argument (its best-supported spelling) and per "--" spelling.
MegatronFlagCounts megatron_flag_counts(bool per_spelling);

std::string megatron_flags_markdown();

}  // namespace strata
