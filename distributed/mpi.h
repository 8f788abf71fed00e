#pragma once
// The MPI backend of Communicator (core/communicator.h) for CPU tensors: the
// component headroom::mpi, built when CMake finds MPI (Debian: libopenmpi-dev).
// A program started by mpirun or srun calls mpi_world() once; every rank then
// sees the same world of size() processes (docs/distributed.md).
#include <memory>

#include "headroom/core/communicator.h"

namespace headroom {

// True when this process was started by an MPI launcher (mpirun, mpiexec,
// srun): its environment names a rank.
bool launched_by_mpi();

// The world communicator over every rank of the job.  Initialises MPI on the
// first call (MPI_Init_thread, MPI_THREAD_FUNNELED: collectives from the
// thread that called it) and finalises it when the last handle goes.  MPI
// errors come back as headroom::Error naming the call and the rank, not as an
// abort.
std::shared_ptr<Communicator> mpi_world();

// Ends every rank of the job now with exit status `code` (MPI_Abort; a plain
// exit where MPI is not initialised).  For a rank that fails while the
// others may wait in a collective, where returning would leave them hanging.
[[noreturn]] void mpi_abort(int code);

}  // namespace headroom
