/// \file
/// The process-level convenience API: one default Engine per process, built
/// from the launcher's environment. Libraries and tests that need several
/// engines construct kolo::Engine directly instead.
///
/// Under kolorun, torchrun, Slurm or mpirun the identity comes from the
/// environment (see LaunchInfo in kolo/config.h); with no launcher, size 1.
#pragma once

#include <vector>

#include "kolo/config.h"
#include "kolo/engine.h"

/// kolo's C++ core: the Engine, its configuration, errors, rendezvous
/// stores and the process-level default engine.
namespace kolo {

//// Reads Config and LaunchInfo from the environment, connects to the job's
/// rendezvous store (hosting it on rank 0 under torchrun) and starts the
/// default engine. Throws InvalidArgument for malformed KOLO_* values and
/// Timeout/PeerFailure when rendezvous fails. Calling init() twice without
/// shutdown() in between throws InvalidArgument. processSets: static process
/// sets (ids 1, 2, ... in this order; see kolo::Engine), the same on every
/// rank.
///
/// Blocks until every rank has arrived (bounded by KOLO_TIMEOUT). Side
/// effects for the life of the process: SIGPIPE is ignored unless the program
/// installed a handler of its own, and a std::terminate handler is installed
/// that tells the other ranks why this one died before chaining to the
/// previous handler. In a worker of kolorun's elastic driver it waits for the
/// first world that lists this worker. Any thread; init() and shutdown()
/// serialize on one lock.
void init(std::vector<std::vector<int>> processSets = {});

/// Shuts the default engine down (idempotent): tells the other ranks, fails
/// this rank's pending operations with ShutdownError and joins the engine's
/// background thread. init() may be called again. References returned by
/// defaultEngine() dangle afterwards. Not from a completion callback (the
/// engine's background thread, which it joins).
void shutdown();

/// What init() registers with std::atexit, so that a program that returns
/// from main() (or calls exit()) without shutdown() still leaves the job
/// while the CUDA runtime is up, and within a bound: shutdown(), given
/// KOLO_TIMEOUT (the init()'s Config::timeout) to finish. When it does not
/// (a completion callback or the GPU is hung), it prints why on stderr and
/// ends the process at once with exit code 1 (std::_Exit), leaving the
/// engine behind. Python's atexit hook calls it too. Does nothing when no
/// engine runs; safe to call more than once.
void shutdownAtExit() noexcept;

/// True between init() and shutdown(). Never throws.
bool isInitialized();

/// The default engine; throws InvalidArgument("kolo::init() has not been
/// called") before init() and after shutdown(). The reference is valid until
/// shutdown(): do not keep it across one.
Engine& defaultEngine();

/// This process's rank in the job, 0 .. size()-1. Throws InvalidArgument
/// before init() (as do the five functions below).
int rank();
/// Number of ranks in the job.
int size();
/// This process's rank among the ranks on its host, 0 .. localSize()-1.
int localRank();
/// Number of ranks on this process's host.
int localSize();
/// Index of this process's host among the job's hosts, as the launcher
/// numbers them (KOLO_CROSS_RANK, torchrun's GROUP_RANK, SLURM_NODEID, ...).
int crossRank();
/// Number of hosts in the job, as the launcher counts them.
int crossSize();

//// The NCCL version this build was compiled against (NCCL_VERSION_CODE, e.g.
/// 22809 for 2.28.9), 0 when it has no NCCL. Needs no init().
int ncclVersion();

}  // namespace kolo
