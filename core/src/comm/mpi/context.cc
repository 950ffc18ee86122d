#include "comm/mpi/context.h"

#include <sched.h>

#include <utility>

#include "comm/mpi/runtime.h"
#include "kolo/error.h"

namespace kolo::comm::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// MPI_Test calls between deadline checks, and busy polls before each later
// poll yields the core (ranks often share few cores with other work).
constexpr int kPollsPerClockCheck = 64;
constexpr int kBusyPolls = 2000;
// Tag of MPI_Comm_create_group for process sets (sets are created one at a
// time, in the same order by every member).
constexpr int kProcessSetTag = 7161;

}  // namespace

std::string errorString(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(rc);
  }
  return std::string(text, length);
}

bool pollUntil(MPI_Request& req, Clock::time_point deadline, int* rc) {
  for (long polls = 0;; ++polls) {
    int done = 0;
    *rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (*rc != MPI_SUCCESS || done) return true;
    if (polls % kPollsPerClockCheck == 0 && Clock::now() >= deadline) return false;
    if (polls > kBusyPolls) sched_yield();
  }
}

std::unique_ptr<Context> Context::create(const BackendArgs& args, const char* role) {
  const Identity& id = args.identity;
  KOLO_CHECK_ARG(id.size >= 1 && id.rank >= 0 && id.rank < id.size,
                 "mpi: bad identity rank " + std::to_string(id.rank) + " of size " +
                     std::to_string(id.size));
  const auto timeout = args.config.timeout;
  KOLO_CHECK_ARG(timeout.count() > 0, "mpi: timeout must be positive");
  RuntimeUse runtime;  // initialises MPI if nobody has
  int worldRank = 0, worldSize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  const std::vector<int>& members = args.worldRanks;
  MPI_Comm base = MPI_COMM_SELF;
  MPI_Comm group = MPI_COMM_NULL;  // a process set's communicator, freed below
  if (!members.empty() && id.size > 1) {
    // A process set: its members' communicator, created by them alone.
    if (static_cast<int>(members.size()) != id.size || members[id.rank] != worldRank) {
      throw InvalidArgument("mpi: process set member " + std::to_string(id.rank) + " of " +
                            std::to_string(id.size) + " is not MPI_COMM_WORLD rank " +
                            std::to_string(worldRank) + " (the MPI backend needs one kolo rank "
                            "per MPI process, in MPI_COMM_WORLD order)");
    }
    for (int r : members) {
      if (r < 0 || r >= worldSize) {
        throw InvalidArgument("mpi: process set rank " + std::to_string(r) +
                              " is outside MPI_COMM_WORLD (size " + std::to_string(worldSize) +
                              ")");
      }
    }
    MPI_Group world = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, id.size, members.data(), &sub);
    // Collective over the members only; they all reach it at the same point
    // of the job's order of process set changes.
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, sub, kProcessSetTag, &group);
    MPI_Group_free(&sub);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS) {
      throw PeerFailure(std::string("mpi ") + role +
                        " communicator of a process set: MPI_Comm_create_group failed: " +
                        errorString(rc));
    }
    base = group;
  } else if (id.size > 1) {
    if (worldRank != id.rank || worldSize != id.size) {
      throw InvalidArgument(
          "mpi: kolo's identity (rank " + std::to_string(id.rank) + " of " +
          std::to_string(id.size) + ") differs from MPI_COMM_WORLD (rank " +
          std::to_string(worldRank) + " of " + std::to_string(worldSize) +
          "); the MPI backend needs the job started by mpirun (or kolorun --mpi) "
          "with one kolo rank per MPI process");
    }
    base = MPI_COMM_WORLD;
  }
  struct FreeGroup {
    MPI_Comm& comm;
    ~FreeGroup() {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
  } freeGroup{group};
  const std::string what = std::string("mpi ") + role + " communicator (rank " +
                           std::to_string(id.rank) + " of " + std::to_string(id.size) + ")";
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(base, &comm, &req);
  if (rc != MPI_SUCCESS) throw PeerFailure(what + ": MPI_Comm_idup failed: " + errorString(rc));
  if (!pollUntil(req, Clock::now() + timeout, &rc)) {
    // The pending duplication is abandoned with its communicator.
    throw Timeout(what + ": not every rank created it within " +
                  std::to_string(timeout.count()) + " ms");
  }
  if (rc != MPI_SUCCESS) throw PeerFailure(what + ": MPI_Comm_idup failed: " + errorString(rc));
  // Errors come back as codes and become kolo exceptions here, instead of
  // MPI's default of aborting the job.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Context>(new Context(comm, id.rank, id.size, timeout, role));
}

Context::Context(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout,
                 std::string role)
    : comm_(comm), rank_(rank), size_(size), timeout_(timeout), role_(std::move(role)) {}

Context::~Context() {
  // A communicator with a pending request cannot be freed; it is abandoned.
  if (abandoned_ || !mpiActive()) return;
  MPI_Comm_free(&comm_);
}

void Context::checkUsable(const char* what) const {
  if (!failed_) return;
  const std::string message = std::string("mpi ") + what +
                              " failed: backend unusable after an earlier failure: " + failure_;
  if (failedByTimeout_) throw Timeout(message);
  throw PeerFailure(message);
}

void Context::check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  fail(std::string("mpi ") + what + " failed: " + errorString(rc), false);
}

void Context::wait(MPI_Request& req, const char* what) {
  int rc = MPI_SUCCESS;
  if (!pollUntil(req, Clock::now() + timeout_, &rc)) {
    abandoned_ = true;
    fail(std::string("mpi ") + what + " failed: not every rank took part within " +
             std::to_string(timeout_.count()) + " ms (timeout)",
         true);
  }
  check(rc, what);
}

void Context::fail(const std::string& message, bool isTimeout) {
  noteFailure();
  failed_ = true;
  failedByTimeout_ = isTimeout;
  failure_ = message;
  if (isTimeout) throw Timeout(message);
  throw PeerFailure(message);
}

}  // namespace kolo::comm::mpi
