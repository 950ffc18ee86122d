// The conformance suite's rank runner for shared memory between processes
// (replaces conformance.cc in test_comm_shm_processes): ranks are the
// processes of an mpirun job, used only as a launcher and to agree on the
// outcome; the backend under test rendezvous through a FileStore in a fresh
// directory per run (rank 0 creates it and tells the others over MPI).
// runWithArgs(n, fn) runs fn once in this process, as its world rank when
// n is the world size, or as rank 0 of a one-rank group when n is 1.
#include <mpi.h>
#include <stdlib.h>

#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "comm/conformance.h"
#include "comm/mpi_world.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo::test {
namespace {

// Rank 0's fresh directory, known to every rank.
std::string sharedDirectory() {
  std::vector<char> path(4096, 0);
  if (mpiWorldRank() == 0) {
    const char* base = getenv("TMPDIR");
    std::string templ =
        std::string(base != nullptr && *base != 0 ? base : "/tmp") + "/kolo-shm-conformance-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    templ.copy(path.data(), path.size() - 1);
  }
  MPI_Bcast(path.data(), static_cast<int>(path.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  return path.data();
}

}  // namespace

void runWithArgs(int n, const std::function<void(int rank, const comm::BackendArgs&)>& fn,
                 const Config& config) {
  const int world = mpiWorldSize();
  if (n != 1 && n != world) {
    throw std::runtime_error("test wants " + std::to_string(n) + " ranks but mpirun started " +
                             std::to_string(world));
  }
  Identity id;
  std::string dir;
  std::shared_ptr<Store> store;
  if (n > 1) {
    id.rank = mpiWorldRank();
    id.size = n;
    dir = sharedDirectory();
    store = makeFileStore(dir);
  } else {
    store = makeHashStore();
  }
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
  if (n > 1 && id.rank == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  if (!agreed.empty()) throw std::runtime_error(agreed);
}

}  // namespace kolo::test
