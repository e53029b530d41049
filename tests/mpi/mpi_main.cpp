// Catch2 v2 main for strata_mpi_tests (run under scripts/mpirun.sh; see tests/CMakeLists.txt).
// Initialises MPI (MPI_THREAD_MULTIPLE), runs the collective watchdog (default 120 s,
// STRATA_WATCHDOG_TIMEOUT_SECONDS overrides) so that a rank stuck in a collective aborts the job
// instead of hanging it, and after every test case agrees over all ranks whether it failed
// anywhere: then every rank aborts, since the ranks' collectives no longer match.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdio>

#include "parallel/parallel_config.h"
#include "parallel/watchdog.h"

namespace {

struct AbortOnAnyRankFailure : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    int failed = stats.totals.assertions.failed > 0 ? 1 : 0;
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      std::fflush(stdout);
      std::fprintf(stderr, "strata_mpi_tests: rank %d: test case \"%s\" failed on %s; aborting all ranks\n", rank,
                   stats.testInfo.name.c_str(), failed ? "this rank" : "another rank");
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(AbortOnAnyRankFailure)

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  strata::ParallelConfig parallel;
  parallel.distributed_timeout_minutes = 2;
  strata::start_watchdog(strata::Watchdog::Options{strata::watchdog_timeout_seconds(parallel), rank, {}, 0.05});
  const int rc = Catch::Session().run(argc, argv);
  strata::stop_watchdog();
  MPI_Finalize();
  return rc;
}
