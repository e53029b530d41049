// Phase timers: named wall-clock scopes that add their duration into a process-wide table while
// enabled (off by default: a disabled scope costs one relaxed atomic load). `strata bench train
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

// Times its own lifetime under `name` (a string literal: the pointer is kept) when enabled.
class Scope {
 public:
  explicit Scope(const char* name) : name_(enabled() ? name : nullptr) {
    if (name_) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (name_) add(name_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace strata::phase_timer
