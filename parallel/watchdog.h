// Collective watchdog: every collective of an MPI or NCCL communicator records (collective name,
// group name, training step) while it is in flight; a thread aborts all ranks with a message naming
// the rank, the step and the collective when one stays in flight longer than the timeout
// (parallel.distributed_timeout_minutes; env STRATA_WATCHDOG_TIMEOUT_SECONDS overrides it, for tests
// and debugging). Host (MPI) collectives are in flight for the duration of the blocking call;
// device (NCCL) collectives until the CUDA event recorded after them completes (a `done` probe
// polled by the thread), because NCCL calls return before the collective runs.
// Reference: PyTorch ProcessGroupNCCL watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING, ncclCommAbort on
// timeout), Megatron --distributed-timeout-minutes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace strata {

struct ParallelConfig;

class Watchdog {
 public:
  struct Options {
    double timeout_seconds = 600;
    int rank = 0;  // named in the message
    // Called once, from the watchdog thread, with the message when a collective times out.
    // Default (empty): print it and abort all ranks (abort_all in parallel/distributed.h: the
    // registered abort hooks such as ncclCommAbort, then MPI_Abort).
    std::function<void(const std::string&)> on_timeout;
    double poll_seconds = 0.05;
  };
  explicit Watchdog(Options options);
  ~Watchdog();  // stops and joins the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Marks a collective in flight and returns its id. Without `done` the caller ends it with
  // end(id); with `done` the thread polls done() and ends it once it returns true.
  uint64_t begin(const std::string& collective, const std::string& group, std::function<bool()> done = {});
  void end(uint64_t id);
  size_t in_flight() const;
  bool fired() const;
  double timeout_seconds() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The training step recorded with each collective (process-wide; the trainer sets it).
void watchdog_set_step(int64_t step);
int64_t watchdog_step();

// The process-wide watchdog the communicators report to. start replaces a running one; with
// timeout_seconds <= 0 none runs. Communicators work the same without one.
void start_watchdog(Watchdog::Options options);
void stop_watchdog();
std::shared_ptr<Watchdog> active_watchdog();

// Seconds: STRATA_WATCHDOG_TIMEOUT_SECONDS when set (a number > 0, else an error naming the
// variable), else parallel.distributed_timeout_minutes · 60.
double watchdog_timeout_seconds(const ParallelConfig& parallel);

// RAII record of one host collective on the active watchdog (no-op without one).
class CollectiveScope {
 public:
  CollectiveScope(const char* collective, const std::string& group);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  std::shared_ptr<Watchdog> watchdog_;
  uint64_t id_ = 0;
};

}  // namespace strata
