// Graceful stop on SIGTERM/SIGINT (Megatron --exit-signal-handler): the handler only sets a flag;
// the trainer checks it at the next step boundary, saves a checkpoint and exits 0.
// Reference: megatron/training/dist_signal_handler.py.
#pragma once

namespace strata {

// Installs handlers for SIGTERM and SIGINT while alive and restores the previous ones on
// destruction. The flag is cleared on construction.
class StopSignalGuard {
 public:
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;
};

// True once SIGTERM or SIGINT arrived while a guard was installed.
bool stop_signal_received();
// The signal number that arrived (0 if none).
int stop_signal_number();
void clear_stop_signal();

}  // namespace strata
