// spdlog set-up for core/logging.h.
#include "core/logging.h"

#include <omp.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

#include "core/error.h"

namespace strata {

int omp_threads_hint() { return omp_get_max_threads(); }

namespace log {
namespace {
std::shared_ptr<spdlog::logger> make_logger() {
  auto l = spdlog::stderr_color_mt("strata");
  l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  l->set_level(spdlog::level::info);
  if (const char* env = std::getenv("STRATA_LOG_LEVEL")) {
    auto lvl = spdlog::level::from_str(env);
    l->set_level(lvl);
  }
  return l;
}
}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = make_logger();
  return *l;
}

void set_rank(int rank, int world_size) {
  if (world_size > 1)
    logger().set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}] [%^%l%$] %v", rank));
}

void set_level(const std::string& level) {
  static const char* names[] = {"trace", "debug", "info", "warn", "error", "off"};
  for (const char* n : names)
    if (level == n) {
      logger().set_level(spdlog::level::from_str(level));
      return;
    }
  STRATA_THROW("bad log level '", level, "' (expected trace, debug, info, warn, error or off)");
}
}  // namespace log
}  // namespace strata
