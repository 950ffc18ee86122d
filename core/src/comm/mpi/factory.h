// The only way the engine reaches the mpi backend.
//
// Each call duplicates MPI_COMM_WORLD (MPI_COMM_SELF for a one-rank
// identity) into a communicator of its own, initialising MPI first if the
// application has not (runtime.h: who finalises). Collective over the MPI
// world: every rank makes the same calls in the same order. args.store and
// args.localAddress are not used. Throws InvalidArgument when the identity
// is not this process's place in MPI_COMM_WORLD, Timeout when a rank does not
// show up within args.config.timeout.
#pragma once

#include <memory>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/control_channel.h"
#include "kolo/config.h"

namespace kolo::comm::mpi {

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args);
std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args);

// This process's place in MPI_COMM_WORLD: rank/size, local rank/size from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), cross rank/size from splitting
// the world by local rank. Initialises MPI if needed. Collective.
Identity worldIdentity();

// True when the MPI library reports CUDA support at run time
// (MPIX_Query_cuda_support from mpi-ext.h); GPU buffers may then go to MPI
// directly. False when the library cannot tell. Initialises MPI if needed.
bool cudaAware();

}  // namespace kolo::comm::mpi
