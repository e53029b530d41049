// The collective watchdog (parallel/watchdog.h) and init_distributed without a launcher
// (parallel/distributed.h), in one process: a collective in flight past the timeout fires once
// with a message naming rank, step, collective and group; ended or completed (probe) entries do
// not; the timeout comes from the config or STRATA_WATCHDOG_TIMEOUT_SECONDS.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "parallel/distributed.h"
#include "parallel/mpi_communicator.h"
#include "parallel/parallel_config.h"
#include "parallel/watchdog.h"
#include "test_helpers.h"

namespace strata {
namespace {

struct Captured {
  std::mutex mutex;
  std::string message;
  std::atomic<int> calls{0};
};

Watchdog::Options options(double timeout, Captured& captured) {
  return Watchdog::Options{timeout, 3,
                           [&captured](const std::string& m) {
                             std::lock_guard<std::mutex> lock(captured.mutex);
                             captured.message = m;
                             ++captured.calls;
                           },
                           0.01};
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Polls pred for up to 5 s (the watchdog thread may be scheduled late on a loaded machine).
template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 500 && !pred(); ++i) sleep_s(0.01);
  return pred();
}

}  // namespace

TEST_CASE("watchdog: a collective past the timeout fires once, naming rank, step and collective", "[watchdog]") {
  Captured captured;
  Watchdog w(options(0.15, captured));
  watchdog_set_step(42);
  w.begin("reduce_scatter", "dp");
  CHECK(eventually([&] { return captured.calls.load() > 0; }));
  sleep_s(0.2);
  CHECK(w.fired());
  CHECK(captured.calls == 1);
  std::lock_guard<std::mutex> lock(captured.mutex);
  CHECK_THAT(captured.message, Catch::Contains("rank 3") && Catch::Contains("collective reduce_scatter") &&
                                   Catch::Contains("group dp") && Catch::Contains("step 42") &&
                                   Catch::Contains("aborting all ranks"));
  watchdog_set_step(0);
}

TEST_CASE("watchdog: ended and completed collectives do not fire", "[watchdog]") {
  Captured captured;
  Watchdog w(options(1.0, captured));
  for (int i = 0; i < 50; ++i) {
    const uint64_t id = w.begin("all_reduce", "tp");
    w.end(id);
  }
  CHECK(w.in_flight() == 0);
  // A device collective ends when its probe says so (the NCCL event), polled by the thread.
  std::atomic<bool> done{false};
  w.begin("all_gather", "tp", [&done] { return done.load(); });
  CHECK(w.in_flight() == 1);
  sleep_s(0.05);
  done = true;
  CHECK(eventually([&] { return w.in_flight() == 0; }));
  CHECK_FALSE(w.fired());
  CHECK(captured.calls == 0);
  CHECK_THROWS_WITH(Watchdog(options(0, captured)), Catch::Contains("timeout must be > 0"));
}

TEST_CASE("watchdog: the process-wide watchdog and CollectiveScope", "[watchdog]") {
  Captured captured;
  start_watchdog(options(0.1, captured));
  REQUIRE(active_watchdog() != nullptr);
  {
    CollectiveScope scope("broadcast", "pp");
    CHECK(active_watchdog()->in_flight() == 1);
  }
  CHECK(active_watchdog()->in_flight() == 0);
  {
    CollectiveScope scope("barrier", "world");
    CHECK(eventually([&] { return captured.calls.load() > 0; }));
  }
  CHECK(captured.calls == 1);
  CHECK_THAT(captured.message, Catch::Contains("collective barrier on group world"));
  stop_watchdog();
  CHECK(active_watchdog() == nullptr);
  CollectiveScope none("barrier", "world");  // no watchdog: a no-op
}

TEST_CASE("watchdog: timeout from parallel.distributed_timeout_minutes or the environment", "[watchdog]") {
  ParallelConfig p;
  p.distributed_timeout_minutes = 3;
  unsetenv("STRATA_WATCHDOG_TIMEOUT_SECONDS");
  CHECK(watchdog_timeout_seconds(p) == 180.0);
  setenv("STRATA_WATCHDOG_TIMEOUT_SECONDS", "2.5", 1);
  CHECK(watchdog_timeout_seconds(p) == 2.5);
  setenv("STRATA_WATCHDOG_TIMEOUT_SECONDS", "soon", 1);
  CHECK_THROWS_WITH(watchdog_timeout_seconds(p), Catch::Contains("STRATA_WATCHDOG_TIMEOUT_SECONDS=soon"));
  unsetenv("STRATA_WATCHDOG_TIMEOUT_SECONDS");
}

TEST_CASE("init_distributed: without a launcher, one process on the self communicator", "[watchdog]") {
  if (launched_by_mpi_launcher() || mpi_initialized()) return;  // run under mpirun: not this case
  ParallelConfig p;
  DistributedRuntime rt = init_distributed(p, Device::cpu());
  CHECK(rt.world_size == 1);
  CHECK(rt.rank == 0);
  CHECK(rt.local_rank == 0);
  CHECK_FALSE(rt.uses_mpi());
  REQUIRE(rt.world_host != nullptr);
  CHECK(std::string(rt.world_host->backend()) == "self");
  CHECK(rt.world_device == nullptr);
  CHECK(active_watchdog() == nullptr);
  CHECK(run_or_abort(rt, [] { return 5; }) == 5);
  CHECK_FALSE(rt.world_host->deterministic());
  CHECK(init_distributed(p, Device::cpu(), /*deterministic=*/true).world_host->deterministic());
  // One process: errors propagate to the normal CLI error path.
  CHECK_THROWS_WITH(run_or_abort(rt, []() -> int { STRATA_THROW("boom"); }), Catch::Contains("boom"));
  p.world_size = 4;
  CHECK_THROWS_WITH(init_distributed(p, Device::cpu()), Catch::Contains("parallel.world_size: 4"));
  CHECK_FALSE(launched_world_size().has_value());
  CHECK_THROWS_WITH(make_mpi_world_communicator(), Catch::Contains("MPI"));
}

}  // namespace strata
