// Runtime: who owns MPI in this process. MPI is process-global (one
// MPI_Init, at most one MPI_Finalize, never a second MPI_Init), so this is
// the one piece of process state of the mpi backend.
//
// Policy:
// - The application initialised MPI: kolo uses it as is (it must have asked
//   for MPI_THREAD_SERIALIZED or more, since kolo calls MPI from its
//   background thread) and never finalises it.
// - Otherwise the first RuntimeUse calls MPI_Init_thread(SERIALIZED) and
//   registers an atexit handler that calls MPI_Finalize at process exit when
//   no RuntimeUse is alive. kolo never finalises earlier: MPI cannot be
//   initialised again, and a later kolo::init() must still work.
//   If an engine is still alive at exit (kolo::shutdown() not called), the
//   handler leaves MPI alone and says so on stderr. After a failed MPI
//   operation it calls MPI_Abort instead of MPI_Finalize (see noteFailure).
//
// Threading: any thread. MPI calls made by users of the runtime must be
// serialised by them (kolo: one engine's background thread at a time).
#pragma once

namespace kolo::comm::mpi {

// Keeps MPI initialised while alive. Throws InvalidArgument when MPI was
// already finalised or initialised with a thread level below SERIALIZED.
class RuntimeUse {
 public:
  RuntimeUse();
  ~RuntimeUse();
  RuntimeUse(const RuntimeUse&) = delete;
  RuntimeUse& operator=(const RuntimeUse&) = delete;

  // True when kolo called MPI_Init_thread (and will finalise at exit).
  bool ownsMpi() const;
  // The thread level MPI provides (MPI_THREAD_*).
  int threadLevel() const;
};

// True while MPI is initialised and not yet finalised.
bool mpiActive();

// Records that an MPI operation failed or timed out. A peer that is stopped
// or hung would then keep MPI_Finalize waiting forever, so at exit kolo
// calls MPI_Abort instead (only when kolo initialised MPI; an application
// that owns MPI should call MPI_Abort itself after a kolo error).
void noteFailure();

}  // namespace kolo::comm::mpi
