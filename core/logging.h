// Logging through spdlog: rank-prefixed lines ("[rank 3] ..."), level from the
// STRATA_LOG_LEVEL environment variable (trace|debug|info|warn|error|off) or set_log_level().
// Host code only (uses fmt); .cu files report through errors instead.
#pragma once
#include <spdlog/spdlog.h>

#include <string>

namespace strata::log {

spdlog::logger& logger();
void set_rank(int rank, int world_size);  // prefix lines with the rank once world_size > 1
void set_level(const std::string& level);  // throws strata::Error naming a bad level

template <typename... Args>
void trace(fmt::format_string<Args...> f, Args&&... a) { logger().trace(f, std::forward<Args>(a)...); }
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) { logger().debug(f, std::forward<Args>(a)...); }
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) { logger().info(f, std::forward<Args>(a)...); }
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) { logger().warn(f, std::forward<Args>(a)...); }
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... a) { logger().error(f, std::forward<Args>(a)...); }

}  // namespace strata::log
