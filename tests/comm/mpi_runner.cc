// The conformance suite's rank runner for MPI (replaces conformance.cc in
// test_comm_mpi): ranks are the processes of an mpirun job, not threads.
// runWithArgs(n, fn) runs fn once in this process, as its MPI world rank
// when n is the world size, or as rank 0 of a one-rank job when n is 1.
// Afterwards the ranks exchange outcomes, so every rank throws the same
// error (the first root cause, as in conformance.cc) or none.
#include <mpi.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/conformance.h"
#include "comm/mpi/factory.h"
#include "comm/mpi_world.h"
#include "harness/harness.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo::test {

void runWithArgs(int n,
                 const std::function<void(int rank, const comm::BackendArgs&)>& fn,
                 const Config& config) {
  const int world = mpiWorldSize();
  if (n != 1 && n != world) {
    throw std::runtime_error("test wants " + std::to_string(n) + " ranks but mpirun started " +
                             std::to_string(world));
  }
  Identity id;
  if (n > 1) id = comm::mpi::worldIdentity();
  auto store = makeHashStore();  // unused by the mpi backend
  std::string failure;
  bool rootCause = false;
  try {
    fn(id.rank, comm::BackendArgs{config, id, store, "127.0.0.1"});
  } catch (const Error& e) {
    rootCause = e.code() != ErrorCode::kPeerFailure && e.code() != ErrorCode::kTimeout;
    failure = "rank " + std::to_string(mpiWorldRank()) + ": " + e.what();
  } catch (const std::exception& e) {
    rootCause = true;
    failure = "rank " + std::to_string(mpiWorldRank()) + ": " + e.what();
  }
  const std::string agreed = agreeOnFailure(failure, rootCause);
  if (!agreed.empty()) throw std::runtime_error(agreed);
}

}  // namespace kolo::test
