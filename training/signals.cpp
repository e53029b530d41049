// SIGTERM/SIGINT flag (see signals.h). The handler is async-signal-safe: it stores a sig_atomic_t.
#include "training/signals.h"

#include <csignal>

namespace strata {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
struct sigaction g_old_term, g_old_int;

extern "C" void strata_stop_handler(int sig) { g_stop_signal = sig; }
}  // namespace

StopSignalGuard::StopSignalGuard() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = strata_stop_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

StopSignalGuard::~StopSignalGuard() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

bool stop_signal_received() { return g_stop_signal != 0; }
int stop_signal_number() { return static_cast<int>(g_stop_signal); }
void clear_stop_signal() { g_stop_signal = 0; }

}  // namespace strata
