// Phase timers: named wall-clock scopes that add their duration into a process-wide table while
// enabled, and record trace events while a trace is on (off by default: an inactive scope costs
// one relaxed atomic load). `strata bench train
// --phases` enables them to print where a training step spends its time (forward, backward,
// optimizer, and the big pieces inside them). Host time only: on CUDA a scope measures launch
// time unless the code inside synchronizes. Names are "phase/sub-phase" paths; nested scopes
// overlap (a parent's time includes its children's).
// Reference: llm.c's per-kernel timing in train_gpt2.c, PyTorch's record_function.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::phase_timer {

void set_enabled(bool on);
bool enabled();
// Whether any scope does work: totals enabled or a trace being recorded.
bool active();
// Forget every total.
void reset();
// Adds `ms` to the total of `name` (one more call).
void add(const char* name, double ms);

struct Total {
  std::string name;
  double ms = 0.0;    // summed over calls
  int64_t calls = 0;
};
// Every name seen since the last reset(), in first-seen order.
std::vector<Total> totals();

// A trace (logging.profile): while recording, every scope is also kept as a complete event (and,
// in CUDA builds, marked as an NVTX range for Nsight Systems), for a Chrome trace-event / Perfetto
// JSON file. Host wall time, like the totals.
struct TraceEvent {
  const char* name;
  double start_us, duration_us;  // microseconds since start_trace()
  int depth;                     // nesting level (0: outermost)
};
void start_trace();
bool tracing();
// Stops recording and returns the events, in the order their scopes ended.
std::vector<TraceEvent> stop_trace();
// Writes Chrome's trace-event JSON: {"traceEvents": [{"name", "ph": "X", "ts", "dur", "pid", "tid"}]}
// (opens in chrome://tracing and ui.perfetto.dev); pid: the rank. Throws naming the file on failure.
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events, int pid);

// Times its own lifetime under `name` (a string literal: the pointer is kept) when active.
class Scope {
 public:
  explicit Scope(const char* name) : name_(active() ? name : nullptr) {
    if (name_) begin();
  }
  ~Scope() {
    if (name_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin();
  void end();
  const char* name_;
  bool traced_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace strata::phase_timer
