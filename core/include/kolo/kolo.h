// The process-level convenience API: one default Engine per process, built
// from the launcher's environment. Libraries and tests that need several
// engines construct kolo::Engine directly instead.
//
// Under kolorun, torchrun, Slurm or mpirun the identity comes from the
// environment (see LaunchInfo in kolo/config.h); with no launcher, size 1.
#pragma once

#include <vector>

#include "kolo/config.h"
#include "kolo/engine.h"

namespace kolo {

// Reads Config and LaunchInfo from the environment, connects to the job's
// rendezvous store (hosting it on rank 0 under torchrun) and starts the
// default engine. Throws InvalidArgument for malformed KOLO_* values and
// Timeout/PeerFailure when rendezvous fails. Calling init() twice without
// shutdown() in between is an error. processSets: static process sets
// (ids 1, 2, ... in this order; see kolo::Engine), the same on every rank.
void init(std::vector<std::vector<int>> processSets = {});

// Shuts the default engine down (idempotent). init() may be called again.
void shutdown();

bool isInitialized();

// The default engine; throws InvalidArgument("kolo::init() has not been
// called") before init() and after shutdown().
Engine& defaultEngine();

int rank();
int size();
int localRank();
int localSize();
int crossRank();
int crossSize();

// The NCCL version this build was compiled against (NCCL_VERSION_CODE, e.g.
// 22809 for 2.28.9), 0 when it has no NCCL.
int ncclVersion();

}  // namespace kolo
