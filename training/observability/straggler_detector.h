// Straggler detection (Megatron's --log-straggler): every rank adds its compute time of each
// iteration (the step's wall time less the time it spent in communication, where a fast rank waits
// for a slow one); at each log interval the ranks' times are gathered and the logging rank names the
// slowest and the fastest rank (the logging.straggler_minmax_count slowest and fastest when that is
// above 1 and below the world size). Rank 0 listens on logging.straggler_ctrlr_port: any TCP
// connection (`curl localhost:PORT`) toggles the detector at the next log interval, which every rank
// agrees on; logging.disable_straggler_on_startup starts it off.
// Reference: megatron/core/utils.py (StragglerDetector: configure, report, _check_toggle, _handler,
// _controller), megatron/training/training.py (training_log: stimer.report every log_interval).
// Megatron times the GPU's forward kernels with CUDA events and adds power, temperature, utilisation
// and clock (NVML); Strata reports the per-rank compute time on every backend (docs/parallelism.md, "Checks across ranks").
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/process_group.h"

namespace strata {

// The report lines for per-rank compute times (index = rank, ms per iteration): min and max with
// their ranks, and with 1 < count < ranks the `count` slowest and fastest. Empty for no ranks.
std::vector<std::string> straggler_report_lines(const std::vector<double>& ms_per_iteration, int64_t count);

class StragglerDetector {
 public:
  // world: every rank of the run; port: rank 0's toggle listener (null: none).
  StragglerDetector(const ProcessGroup& world, int64_t minmax_count, bool enabled, std::optional<int64_t> port);
  ~StragglerDetector();
  StragglerDetector(const StragglerDetector&) = delete;
  StragglerDetector& operator=(const StragglerDetector&) = delete;

  // This rank's compute seconds of one iteration (ignored while off).
  void add(double compute_seconds);
  // Every rank, at each log interval: gathers the per-iteration times of the `iterations` since the
  // last report and returns the report lines (every rank gets them; the trainer prints on its
  // logging rank), then applies a toggle requested on rank 0. Lines saying so when it toggles.
  std::vector<std::string> report(int64_t iterations);

  bool enabled() const { return enabled_; }
  // The TCP port rank 0 listens on (0 when not listening), for tests.
  int listening_port() const { return listening_port_; }

 private:
  void listen(int64_t port);
  void serve();

  ProcessGroup world_;
  int64_t minmax_count_;
  bool enabled_;
  double compute_seconds_ = 0.0;
  int listen_fd_ = -1;
  int listening_port_ = 0;
  std::atomic<bool> toggle_requested_{false};
  std::atomic<bool> stopping_{false};
  std::thread controller_;
};

}  // namespace strata
