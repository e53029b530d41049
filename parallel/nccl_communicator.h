// The NCCL communicator (parallel/nccl_communicator.cpp): device tensors over NCCL, bootstrapped
// over an MPI communicator of the same ranks. Only the .cpp includes <nccl.h>; CUDA builds only
// (elsewhere the factory throws).
// Reference: NCCL user guide (ncclCommInitRank with an id broadcast over MPI, group calls,
// ncclCommSplit, ncclCommAbort); llm.c multi_gpu_config_init; megatron/training/determinism.py.
#pragma once
#include <memory>

#include "core/device.h"
#include "parallel/communicator.h"

namespace strata {

// Collective over `bootstrap` (host communicator, same ranks in the same order): rank 0 creates
// the unique id, bootstrap broadcasts it, every rank joins with ncclCommInitRank on `device`.
std::shared_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Device device);

// Deterministic mode for NCCL: sets NCCL_ALGO=Ring and NCCL_PROTO=Simple (when unset) before the
// first communicator is created; a different value already in the environment is an error naming
// the variable (rejected, not silently changed). No-op without NCCL.
void nccl_prepare_deterministic_env();

}  // namespace strata
