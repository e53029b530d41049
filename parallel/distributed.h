// Process launch: init_distributed joins the job the launcher started (mpirun, srun) and returns
// the world communicators; a process started without a launcher runs alone on the self
// communicator, so a plain `strata train` never needs MPI.
//   Launched = one of these environment variables is set:
//     OMPI_COMM_WORLD_SIZE (Open MPI mpirun/mpiexec), PMI_SIZE (MPICH/Hydra, Intel MPI, srun
//     --mpi=pmi2), PMIX_RANK (srun --mpi=pmix, PMIx launchers), SLURM_STEP_NUM_TASKS (any srun step).
//   Then MPI_Init_thread(MPI_THREAD_MULTIPLE) (unless MPI is already initialised, e.g. by the
//   tests/mpi main; then it is neither initialised nor finalised here), the world host
//   communicator is MPI, the local rank is the rank within the node (MPI_COMM_TYPE_SHARED) and
//   picks the CUDA device cuda:<local_rank>, and on CUDA the world device communicator is NCCL
//   (its unique id broadcast over MPI). The runtime finalises MPI when its last copy is destroyed
//   (RAII); destroyed during an exception it aborts all ranks instead, so the other ranks do not
//   wait in a collective forever. With world_size > 1 the collective watchdog runs
//   (parallel/watchdog.h).
// An error on one rank: run_or_abort prints it with the rank and aborts every rank (MPI_Abort).
// Reference: megatron/training/initialize.py (_initialize_distributed), torch.distributed
// init_process_group, llm.c multi_gpu_config_init (MPI + ncclGetUniqueId broadcast).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "parallel/communicator.h"

namespace strata {

struct ParallelConfig;

struct DistributedRuntime {
  int world_size = 1;
  int rank = 0;
  int local_rank = 0;  // rank within this node
  int local_size = 1;  // ranks on this node
  Device device;       // cpu, or cuda:<local_rank>
  std::shared_ptr<void> session;            // MPI_Finalize when the last copy goes (null: no MPI)
  std::shared_ptr<Communicator> world_host;   // MPI, or self for one process
  std::shared_ptr<Communicator> world_device; // NCCL on CUDA (self for one process); null on CPU
  bool uses_mpi() const { return session != nullptr; }
};

// Joins the launched job (see the file comment). `device`: where the model runs (cpu or cuda);
// on CUDA ranks the index is replaced by the local rank. Checks that parallel.world_size (when
// set) equals the number of launched processes. `deterministic` (training.deterministic): the
// world communicators sum in rank order (communicator.h), and before NCCL is initialised
// NCCL_ALGO=Ring / NCCL_PROTO=Simple are set (nccl_prepare_deterministic_env); communicators
// split from them inherit the mode.
DistributedRuntime init_distributed(const ParallelConfig& parallel, Device device, bool deterministic = false);

// True when a launcher's environment variable (file comment) is set.
bool launched_by_mpi_launcher();
// The number of processes the launcher started: the first of OMPI_COMM_WORLD_SIZE, PMI_SIZE,
// SLURM_STEP_NUM_TASKS holding a positive integer; null when there is none (one process, or a
// launcher that sets only PMIX_RANK). The one reading of the launched world size: `strata train`
// validates the config with it, init_distributed checks MPI_COMM_WORLD against it.
std::optional<int64_t> launched_world_size();
// This process's rank as the launcher set it (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK,
// SLURM_PROCID under srun); null when no launcher variable is set. Readable before MPI starts:
// `strata` prints a config error from rank 0 only (every rank meets the same one).
std::optional<int64_t> launched_rank();
// SLURM_NTASKS (> 1) when no launcher variable is set: the process runs in a multi-task Slurm
// allocation (e.g. the batch script itself) without srun, where `strata train` refuses to train
// alone. Else null.
std::optional<int64_t> slurm_tasks_outside_step();

// True when this binary has the MPI communicator (CMake STRATA_MPI).
bool mpi_built();
// True between MPI_Init and MPI_Finalize.
bool mpi_initialized();

// Prints "strata: error: rank R: <message>" to stderr, runs the abort hooks (ncclCommAbort …), then
// MPI_Abort(MPI_COMM_WORLD, exit_code) when MPI is initialised, else _Exit(exit_code).
[[noreturn]] void abort_all(const std::string& message, int exit_code = 1);
// Hooks run by abort_all before MPI_Abort (the NCCL communicators register ncclCommAbort).
uint64_t add_abort_hook(std::function<void()> hook);
void remove_abort_hook(uint64_t id);

// Runs body; with world_size > 1 an exception escaping it aborts all ranks with a message naming
// this rank and the error (so one failing rank does not leave the others blocked in a
// collective). A user error (strata::Error) prints its user_message (core/user_message.h), without a source location,
// once: see wait_for_rank0_report. With one process the exception propagates unchanged.
int run_or_abort(const DistributedRuntime& runtime, const std::function<int()>& body);

// Under a launcher every rank may meet the same user error, and each would print it. Rank 0
// reports at once; any other rank first waits (5 s, plus 0.2 s per rank up to rank 64), so that
// the launcher, which ends the job at the first report, leaves one message. An error that rank 0
// does not share is still reported after the wait. Returns at once for rank 0 or one process.
void wait_for_rank0_report(std::optional<int64_t> rank);

}  // namespace strata
