#pragma once
// The NCCL backend of Communicator (core/communicator.h) for CUDA tensors:
// the component headroom::nccl, built when the MPI and CUDA parts are and
// CMake finds NCCL (it ships with the CUDA toolkit).  MPI starts the job and
// carries NCCL's id from rank 0 to the others, then NCCL moves the tensors
// between the GPUs (docs/distributed.md).
#include <memory>

#include "headroom/core/communicator.h"
#include "headroom/core/device.h"

namespace headroom {

// Every rank of `bootstrap` (e.g. mpi_world()) joins one NCCL communicator
// on its `device` (cuda:N; one GPU per rank).  A collective on a CUDA
// tensor runs on the device's stream; a CPU tensor (small bookkeeping, as
// DataParallel's) goes to the device and back.  NCCL's errors come back as
// headroom::Error naming the call and the rank.  Every rank must call it.
std::shared_ptr<Communicator> nccl_world(std::shared_ptr<Communicator> bootstrap, Device device);

// The device of this rank among the GPUs of its machine: cuda:(local rank
// mod the device count), the local rank read from the launcher (Open MPI,
// Slurm); cuda:0 when none is set.  Throws when there is no CUDA device.
Device local_cuda_device();

}  // namespace headroom
