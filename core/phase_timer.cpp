// Phase timers (core/phase_timer.h): a mutex-guarded table of totals; only touched while enabled.
#include "core/phase_timer.h"
#include "core/phase_scope_stack.h"

#include <atomic>
#include <fstream>
#include <mutex>

#include "core/error.h"

#if STRATA_WITH_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace strata::phase_timer {
namespace {
constexpr int kTotals = 1, kTrace = 2, kScopeStack = 4;
std::atomic<int> g_flags{0};
std::mutex g_mutex;
std::vector<Total>& table() {
  static std::vector<Total> t;
  return t;
}
std::vector<TraceEvent> g_events;
std::chrono::steady_clock::time_point g_trace_start;
thread_local int t_depth = 0;
// The open scopes of this thread while the scope stack is on: (scope, name), outermost first.
thread_local std::vector<std::pair<const void*, const char*>> t_open;

void set_flag(int flag, bool on) {
  if (on) g_flags.fetch_or(flag, std::memory_order_relaxed);
  else g_flags.fetch_and(~flag, std::memory_order_relaxed);
}

// A JSON string literal of a scope name (names are ASCII paths; escape the two specials anyway).
std::string json_string(const char* s) {
  std::string out = "\"";
  for (const char* c = s; *c; ++c) {
    if (*c == '"' || *c == '\\') out += '\\';
    out += *c;
  }
  return out + "\"";
}
}  // namespace

void set_enabled(bool on) { set_flag(kTotals, on); }
bool enabled() { return (g_flags.load(std::memory_order_relaxed) & kTotals) != 0; }
bool active() { return g_flags.load(std::memory_order_relaxed) != 0; }
bool tracing() { return (g_flags.load(std::memory_order_relaxed) & kTrace) != 0; }

void start_trace() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.clear();
  g_trace_start = std::chrono::steady_clock::now();
  set_flag(kTrace, true);
}

std::vector<TraceEvent> stop_trace() {
  set_flag(kTrace, false);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<TraceEvent> out;
  out.swap(g_events);
  return out;
}

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events, int pid) {
  std::ofstream f(path);
  STRATA_CHECK_KIND(ErrorKind::Io, f.good(), "profile: cannot write the trace file ", path);
  f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    f << (i ? ",\n" : "\n") << "{\"name\": " << json_string(e.name) << ", \"ph\": \"X\", \"ts\": " << e.start_us
      << ", \"dur\": " << e.duration_us << ", \"pid\": " << pid << ", \"tid\": 0}";
  }
  f << "\n]}\n";
  STRATA_CHECK_KIND(ErrorKind::Io, f.good(), "profile: writing the trace file ", path, " failed");
}

void set_scope_stack(bool on) { set_flag(kScopeStack, on); }
bool scope_stack_enabled() { return (g_flags.load(std::memory_order_relaxed) & kScopeStack) != 0; }
std::vector<const char*> open_scopes() {
  std::vector<const char*> out;
  for (const auto& [scope, name] : t_open) out.push_back(name);
  return out;
}

void Scope::begin() {
  if (scope_stack_enabled()) t_open.emplace_back(this, name_);
  start_ = std::chrono::steady_clock::now();
  traced_ = tracing();
  if (!traced_) return;
  ++t_depth;
#if STRATA_WITH_CUDA
  nvtxRangePushA(name_);
#endif
}

void Scope::end() {
  const auto stop = std::chrono::steady_clock::now();
  if (!t_open.empty() && t_open.back().first == this) t_open.pop_back();
  if (enabled()) add(name_, std::chrono::duration<double, std::milli>(stop - start_).count());
  if (!traced_) return;
  --t_depth;
#if STRATA_WITH_CUDA
  nvtxRangePop();
#endif
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!tracing()) return;  // the trace stopped inside this scope
  g_events.push_back({name_, std::chrono::duration<double, std::micro>(start_ - g_trace_start).count(),
                      std::chrono::duration<double, std::micro>(stop - start_).count(), t_depth});
}

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
