#include "comm/mpi/runtime.h"

#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <mutex>
#include <thread>
#include <string>

#include <mpi.h>

#include "kolo/error.h"

namespace kolo::comm::mpi {
namespace {

struct State {
  std::mutex mu;
  bool ownsMpi = false;      // kolo called MPI_Init_thread
  bool atexitRegistered = false;
  bool failed = false;       // an MPI operation failed (noteFailure)
  int users = 0;             // live RuntimeUse objects
  int threadLevel = MPI_THREAD_SINGLE;
};

// Leaked on purpose: the atexit handler may run after static destructors.
State& state() {
  static State* s = new State;
  return *s;
}

const char* levelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

void finalizeAtExit() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.ownsMpi || !mpiActive()) return;
  if (s.failed) {
    std::fprintf(stderr,
                 "kolo: an MPI operation failed earlier (see the error above); a stopped or "
                 "hung peer would keep MPI_Finalize waiting forever, so the MPI job is aborted\n");
    // The other survivors time out at about the same moment; give them a
    // second to report their own errors before the abort ends their processes.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    MPI_Abort(MPI_COMM_WORLD, 1);
    return;
  }
  if (s.users > 0) {
    std::fprintf(stderr,
                 "kolo: %d MPI user(s) still alive at exit (kolo::shutdown() not "
                 "called?); not calling MPI_Finalize\n",
                 s.users);
    return;
  }
  MPI_Finalize();
}

}  // namespace

void noteFailure() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.failed = true;
}

bool mpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

RuntimeUse::RuntimeUse() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    throw InvalidArgument(
        "mpi: MPI has already been finalised in this process and cannot be "
        "initialised again; keep MPI alive while kolo runs (KOLO_CONTROLLER/"
        "KOLO_CPU_OPERATIONS=mpi)");
  }
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      throw InvalidArgument("mpi: MPI_Init_thread failed");
    }
    s.ownsMpi = true;
    s.threadLevel = provided;
    if (!s.atexitRegistered) {
      std::atexit(finalizeAtExit);
      s.atexitRegistered = true;
    }
  } else if (!s.ownsMpi) {
    MPI_Query_thread(&s.threadLevel);
  }
  if (s.threadLevel < MPI_THREAD_SERIALIZED) {
    throw InvalidArgument(
        std::string("mpi: MPI provides ") + levelName(s.threadLevel) +
        " but kolo calls MPI from its background thread and needs "
        "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE: initialise MPI with "
        "MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...) or let kolo do it");
  }
  ++s.users;
}

RuntimeUse::~RuntimeUse() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  --s.users;
}

bool RuntimeUse::ownsMpi() const {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.ownsMpi;
}

int RuntimeUse::threadLevel() const {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.threadLevel;
}

}  // namespace kolo::comm::mpi
