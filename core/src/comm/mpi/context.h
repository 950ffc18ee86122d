// Context: one duplicated MPI communicator and kolo's error policy around it.
// ControlChannel and Collectives each own one (MPI_Comm_dup), so control
// traffic, data traffic and the application's own MPI traffic never match
// each other's messages.
//
// Every operation is started non-blocking and completed by wait(), which
// polls MPI_Test until the request completes or Config::timeout passes, so a
// silent peer is a Timeout instead of a hang. After any failure the context
// is poisoned: every later call throws at once. A request still pending
// after a timeout is abandoned (its communicator is never freed); the
// buffers it names must be considered lost, and the job should end.
//
// Threading: every method except the destructor is called from the one
// thread that drives the owning channel (the engine's background thread);
// every rank calls them in the same order. MPI calls of different contexts
// must not overlap in time (MPI_THREAD_SERIALIZED).
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>

#include "comm/backend_args.h"
#include "comm/mpi/runtime.h"

namespace kolo::comm::mpi {

class Context {
 public:
  // Duplicates MPI_COMM_WORLD, or MPI_COMM_SELF when args.identity.size is 1
  // (so a one-rank engine works inside any MPI job). A multi-rank identity
  // must equal this process's MPI_COMM_WORLD rank and size (InvalidArgument
  // otherwise). Collective over the world: every rank calls it in the same
  // order. With args.worldRanks (a process set) it duplicates a communicator
  // of those MPI_COMM_WORLD ranks instead, collective over them only.
  // `role` names the context in messages ("control", "data").
  static std::unique_ptr<Context> create(const BackendArgs& args, const char* role);

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Throws the earlier failure again when the context is poisoned. Call
  // before starting an operation named `what`.
  void checkUsable(const char* what) const;

  // Turns a non-success return code of the MPI call that started `what`
  // into PeerFailure and poisons the context.
  void check(int rc, const char* what);

  // Completes req: PeerFailure on an MPI error, Timeout when it does not
  // complete within timeout(); both poison the context.
  void wait(MPI_Request& req, const char* what);

 private:
  Context(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout,
          std::string role);

  [[noreturn]] void fail(const std::string& message, bool isTimeout);

  RuntimeUse runtime_;  // first: MPI outlives the communicator
  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::string role_;
  bool failed_ = false;
  bool failedByTimeout_ = false;
  bool abandoned_ = false;  // a request is still pending on comm_
  std::string failure_;
};

// Text of an MPI error code.
std::string errorString(int rc);

// Completes req on comm-less paths (creation) with the same polling policy.
// Returns false when the deadline passed (req is then still pending).
bool pollUntil(MPI_Request& req, std::chrono::steady_clock::time_point deadline,
               int* rc);

}  // namespace kolo::comm::mpi
