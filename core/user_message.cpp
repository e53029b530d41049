// user_message (core/user_message.h).
#include "core/user_message.h"

#include "core/config_table.h"

namespace strata {

std::string user_message(const Error& e) {
  if (dynamic_cast<const config::ConfigError*>(&e)) return e.what();
  return std::string(error_kind_name(e.kind())) + ": " + e.message();
}

}  // namespace strata
