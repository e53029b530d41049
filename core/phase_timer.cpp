// Phase timers (core/phase_timer.h): a mutex-guarded table of totals; only touched while enabled.
#include "core/phase_timer.h"

#include <atomic>
#include <mutex>

namespace strata::phase_timer {
namespace {
std::atomic<bool> g_enabled{false};
std::mutex g_mutex;
std::vector<Total>& table() {
  static std::vector<Total> t;
  return t;
}
}  // namespace

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  table().clear();
}

void add(const char* name, double ms) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Total& t : table()) {
    if (t.name == name) {
      t.ms += ms;
      ++t.calls;
      return;
    }
  }
  table().push_back({name, ms, 1});
}

std::vector<Total> totals() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return table();
}

}  // namespace strata::phase_timer
