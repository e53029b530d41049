// init_distributed, the launcher detection, abort_all and run_or_abort (parallel/distributed.h).
#include "parallel/distributed.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "core/user_message.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"
#include "parallel/parallel_config.h"
#include "parallel/watchdog.h"

#if STRATA_WITH_MPI
#include <mpi.h>
#endif

namespace strata {

namespace {

std::optional<int64_t> env_count(const char* var) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || n <= 0) return std::nullopt;
  return n;
}

// The launchers' environment variables (parallel/distributed.h), in the order they are read.
// count: the value is the number of launched processes (PMIX_RANK is a rank, not a count).
struct LauncherVar {
  const char* name;
  bool count;
};
constexpr LauncherVar kLauncherVars[] = {
    {"OMPI_COMM_WORLD_SIZE", true}, {"PMI_SIZE", true}, {"PMIX_RANK", false}, {"SLURM_STEP_NUM_TASKS", true}};

std::mutex g_hooks_mutex;
std::map<uint64_t, std::function<void()>> g_hooks;
uint64_t g_next_hook = 1;
int g_rank = 0;  // for abort messages

#if STRATA_WITH_MPI
// Owns MPI between MPI_Init_thread and MPI_Finalize (when init_distributed initialised it).
struct MpiSession {
  bool owns = false;             // MPI_Init_thread was called by init_distributed
  bool owns_watchdog = false;    // start_watchdog was called by init_distributed
  int world_size = 1;
  ~MpiSession() {
    if (owns_watchdog) stop_watchdog();
    if (std::uncaught_exceptions() > 0 && world_size > 1) {
      abort_all("exiting on an exception while other ranks may be inside a collective", 1);
    }
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (owns && !finalized) MPI_Finalize();
  }
};
#endif

}  // namespace

bool mpi_built() { return STRATA_WITH_MPI != 0; }

bool mpi_initialized() {
#if STRATA_WITH_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
#else
  return false;
#endif
}

bool launched_by_mpi_launcher() {
  for (const LauncherVar& var : kLauncherVars) {
    const char* v = std::getenv(var.name);
    if (v != nullptr && *v != '\0') return true;
  }
  return false;
}

std::optional<int64_t> launched_world_size() {
  for (const LauncherVar& var : kLauncherVars) {
    if (!var.count) continue;
    if (auto n = env_count(var.name)) return n;
  }
  return std::nullopt;
}

std::optional<int64_t> launched_rank() {
  if (!launched_by_mpi_launcher()) return std::nullopt;
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long long r = std::strtoll(v, &end, 10);
    if (end != v && *end == '\0' && r >= 0) return r;
  }
  return std::nullopt;
}

std::optional<int64_t> slurm_tasks_outside_step() {
  if (launched_by_mpi_launcher()) return std::nullopt;
  auto n = env_count("SLURM_NTASKS");
  if (n && *n > 1) return n;
  return std::nullopt;
}

uint64_t add_abort_hook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  const uint64_t id = g_next_hook++;
  g_hooks.emplace(id, std::move(hook));
  return id;
}

void remove_abort_hook(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  g_hooks.erase(id);
}

void abort_all(const std::string& message, int exit_code) {
  if (g_rank == 0)
    std::fprintf(stderr, "strata: error: %s\n", message.c_str());
  else
    std::fprintf(stderr, "strata: error: rank %d: %s\n", g_rank, message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::map<uint64_t, std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(g_hooks_mutex);
    hooks.swap(g_hooks);
  }
  for (auto& [id, hook] : hooks) {
    try {
      hook();
    } catch (...) {
    }
  }
#if STRATA_WITH_MPI
  if (mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
#endif
  std::_Exit(exit_code);
}

void wait_for_rank0_report(std::optional<int64_t> rank) {
  if (!rank || *rank == 0) return;
  const auto stagger = std::chrono::milliseconds(200) * std::min<int64_t>(*rank, 64);
  std::this_thread::sleep_for(std::chrono::seconds(5) + stagger);
}

int run_or_abort(const DistributedRuntime& runtime, const std::function<int()>& body) {
  if (runtime.world_size <= 1) return body();
  try {
    return body();
  } catch (const Error& e) {
    wait_for_rank0_report(runtime.rank);
    abort_all(user_message(e), 1);
  } catch (const std::exception& e) {
    abort_all(e.what(), 1);
  }
}

DistributedRuntime init_distributed(const ParallelConfig& parallel, Device device, bool deterministic) {
  DistributedRuntime rt;
  rt.device = device.is_cuda() ? Device::cuda(0) : Device::cpu();
  const bool already = mpi_initialized();
  if (!launched_by_mpi_launcher() && !already) {
    // One process: no MPI at all.
    STRATA_CHECK_KIND(ErrorKind::Config, !parallel.world_size || *parallel.world_size == 1,
                      "parallel.world_size: ", parallel.world_size.value_or(1),
                      " but this process was not started by mpirun or srun (one process)");
    rt.world_host = make_self_communicator(DeviceType::CPU);
    rt.world_host->set_deterministic(deterministic);
    if (device.is_cuda()) {
      rt.world_device = make_self_communicator(DeviceType::CUDA);
      rt.world_device->set_deterministic(deterministic);
    }
    return rt;
  }
#if !STRATA_WITH_MPI
  STRATA_THROW_KIND(ErrorKind::Comm, "this process was started by an MPI launcher (mpirun/srun) but strata was built "
                    "without MPI (CMake STRATA_MPI=OFF or MPI not found)");
#else
  auto session = std::make_shared<MpiSession>();
  if (!already) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    STRATA_CHECK_KIND(ErrorKind::Comm, rc == MPI_SUCCESS, "MPI_Init_thread failed (MPI error ", rc, ")");
    session->owns = true;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &rt.world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rt.rank);
  session->world_size = rt.world_size;
  g_rank = rt.rank;
  log::set_rank(rt.rank, rt.world_size);
  rt.session = session;  // from here on MPI is finalised (or the job aborted) when rt goes
  if (auto launched = launched_world_size(); launched && *launched != rt.world_size) {
    abort_all(detail::concat("the launcher started ", *launched, " processes but MPI_COMM_WORLD has ",
                             rt.world_size, " ranks (mixed MPI installations?)"));
  }
  if (parallel.world_size && *parallel.world_size != rt.world_size) {
    wait_for_rank0_report(rt.rank);  // every rank meets it: printed once
    abort_all(detail::concat("ConfigError: parallel.world_size: ", *parallel.world_size, " but ", rt.world_size,
                             " processes were launched"));
  }
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &rt.local_rank);
  MPI_Comm_size(node, &rt.local_size);
  MPI_Comm_free(&node);
  rt.world_host = make_mpi_world_communicator();
  rt.world_host->set_deterministic(deterministic);
  if (device.is_cuda()) {
    const int gpus = cuda_device_count();
    STRATA_CHECK_KIND(ErrorKind::Cuda, rt.local_rank < gpus, "rank ", rt.rank, " is local rank ", rt.local_rank,
                      " of ", rt.local_size, " on its node but the node has ", gpus,
                      " usable GPUs (start at most one rank per GPU)");
    rt.device = Device::cuda(rt.local_rank);
    if (deterministic) nccl_prepare_deterministic_env();
    rt.world_device = make_nccl_communicator(*rt.world_host, rt.device);  // inherits deterministic
  }
  if (rt.world_size > 1 && active_watchdog() == nullptr) {
    session->owns_watchdog = true;
    start_watchdog(Watchdog::Options{watchdog_timeout_seconds(parallel), rt.rank, {}, 0.05});
  }
  return rt;
#endif
}

}  // namespace strata
