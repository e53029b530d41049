// The collective watchdog (parallel/watchdog.h): a map of in-flight collectives under a mutex and
// one thread that wakes every poll interval, retires entries whose `done` probe returns true, and
// fires once when the oldest entry exceeds the timeout.
#include "parallel/watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "core/error.h"
#include "parallel/distributed.h"
#include "parallel/parallel_config.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
std::atomic<int64_t> g_step{0};
std::mutex g_active_mutex;
std::shared_ptr<Watchdog> g_active;
}  // namespace

struct Watchdog::State {
  struct Entry {
    std::string collective, group;
    int64_t step = 0;
    Clock::time_point start;
    std::function<bool()> done;
  };
  Options options;
  mutable std::mutex mutex;
  std::condition_variable cv;
  std::map<uint64_t, Entry> entries;
  uint64_t next_id = 1;
  bool stopping = false;
  std::atomic<bool> fired{false};
  std::thread thread;

  void run() {
    const auto poll = std::chrono::duration<double>(options.poll_seconds);
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      cv.wait_for(lock, poll);
      if (stopping || fired) continue;
      const auto now = Clock::now();
      std::string message;
      for (auto it = entries.begin(); it != entries.end();) {
        Entry& e = it->second;
        if (e.done && e.done()) {
          it = entries.erase(it);
          continue;
        }
        const double elapsed = std::chrono::duration<double>(now - e.start).count();
        if (message.empty() && elapsed > options.timeout_seconds) {
          message = detail::concat("watchdog: rank ", options.rank, ": collective ", e.collective, " on group ",
                                   e.group, " at step ", e.step, " has not completed after ", elapsed,
                                   " s (timeout ", options.timeout_seconds,
                                   " s: parallel.distributed_timeout_minutes, or STRATA_WATCHDOG_TIMEOUT_SECONDS); "
                                   "aborting all ranks");
        }
        ++it;
      }
      if (message.empty()) continue;
      fired = true;
      lock.unlock();
      if (options.on_timeout) {
        options.on_timeout(message);
      } else {
        abort_all(message, 1);
      }
      lock.lock();
    }
  }
};

Watchdog::Watchdog(Options options) : state_(std::make_unique<State>()) {
  STRATA_CHECK(options.timeout_seconds > 0, "watchdog: timeout must be > 0 seconds, got ", options.timeout_seconds);
  STRATA_CHECK(options.poll_seconds > 0, "watchdog: poll interval must be > 0 seconds");
  state_->options = std::move(options);
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
}

uint64_t Watchdog::begin(const std::string& collective, const std::string& group, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const uint64_t id = state_->next_id++;
  state_->entries.emplace(id, State::Entry{collective, group, g_step.load(), Clock::now(), std::move(done)});
  return id;
}

void Watchdog::end(uint64_t id) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->entries.erase(id);
}

size_t Watchdog::in_flight() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->entries.size();
}

bool Watchdog::fired() const { return state_->fired; }
double Watchdog::timeout_seconds() const { return state_->options.timeout_seconds; }

void watchdog_set_step(int64_t step) { g_step = step; }
int64_t watchdog_step() { return g_step.load(); }

void start_watchdog(Watchdog::Options options) {
  std::shared_ptr<Watchdog> w;
  if (options.timeout_seconds > 0) w = std::make_shared<Watchdog>(std::move(options));
  std::shared_ptr<Watchdog> old;
  {
    std::lock_guard<std::mutex> lock(g_active_mutex);
    old = std::exchange(g_active, std::move(w));
  }
}

void stop_watchdog() {
  std::shared_ptr<Watchdog> old;
  {
    std::lock_guard<std::mutex> lock(g_active_mutex);
    old = std::exchange(g_active, nullptr);
  }
}

std::shared_ptr<Watchdog> active_watchdog() {
  std::lock_guard<std::mutex> lock(g_active_mutex);
  return g_active;
}

double watchdog_timeout_seconds(const ParallelConfig& parallel) {
  if (const char* v = std::getenv("STRATA_WATCHDOG_TIMEOUT_SECONDS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    STRATA_CHECK(end != v && *end == '\0' && s > 0, "STRATA_WATCHDOG_TIMEOUT_SECONDS=", v,
                 ": expected a number of seconds > 0");
    return s;
  }
  return static_cast<double>(parallel.distributed_timeout_minutes) * 60.0;
}

CollectiveScope::CollectiveScope(const char* collective, const std::string& group) : watchdog_(active_watchdog()) {
  if (watchdog_) id_ = watchdog_->begin(collective, group);
}

CollectiveScope::~CollectiveScope() {
  if (watchdog_) watchdog_->end(id_);
}

}  // namespace strata
