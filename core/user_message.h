// What a user sees of a strata::Error: "Kind: message", without the source location (which is for
// bug reports of internal errors only); a config::ConfigError names its field instead
// ("ConfigError: section.field: message"). Used wherever an error reaches the user: strata_main
// (apps/strata/cli.cpp) and the multi-rank abort (parallel/distributed.h run_or_abort).
#pragma once
#include <string>

#include "core/error.h"

namespace strata {

std::string user_message(const Error& e);

}  // namespace strata
