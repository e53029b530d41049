// The MPI communicator (parallel/mpi_communicator.cpp): host tensors over MPI. Only the .cpp
// includes <mpi.h>; this header is free of MPI types.
// Reference: MPI 3.1 standard (collectives, MPI_Comm_split), torch.distributed MPI backend.
#pragma once
#include <memory>

#include "parallel/communicator.h"

namespace strata {

// A communicator over a duplicate of MPI_COMM_WORLD (errors returned, thrown as strata::Error of
// kind Comm with MPI's error string). MPI must be initialised (init_distributed, or the
// tests/mpi main); throws when the binary was built without MPI.
std::shared_ptr<Communicator> make_mpi_world_communicator();

}  // namespace strata
