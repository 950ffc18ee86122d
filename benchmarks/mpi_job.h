// MpiJob: the process's place in an mpirun job, for the benchmarks that
// compare MPI and Gloo paths between processes (allreduce sweep, fusion sets,
// latency).
//
// Threading: construct and destroy on the main thread. MPI is initialised
// with MPI_THREAD_SERIALIZED (what kolo's mpi backend needs): while a kolo
// engine on MPI is alive its background thread calls MPI, so the main thread
// must not (the benchmarks tear engines down before any raw MPI call).
#pragma once

#include <memory>
#include <string>

#include "kolo/config.h"
#include "kolo/store.h"
#include "kolo/tcp_store.h"

namespace kolo::bench {

class MpiJob {
 public:
  MpiJob(int* argc, char*** argv);  // MPI_Init_thread
  ~MpiJob();                        // barrier, stops the store server, MPI_Finalize

  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  const kolo::Identity& identity() const { return id_; }
  int rank() const { return id_.rank; }
  int size() const { return id_.size; }
  void barrier() const;

  // A fresh namespace of the job's TCP rendezvous store (rank 0 serves it;
  // its port, host and a random secret travel over MPI, never on a command
  // line). Collective: every rank calls it in the same order, and the n-th
  // call returns the same namespace on every rank, so one engine or Gloo
  // context per call never sees keys of an earlier one.
  std::shared_ptr<kolo::Store> freshStore();

 private:
  kolo::Identity id_;
  std::unique_ptr<kolo::TcpStoreServer> server_;
  std::shared_ptr<kolo::Store> store_;
  int generation_ = 0;
};

// Runs body(job, argc, argv) as a program's main: MPI is initialised first;
// an exception escaping body is printed with the rank and aborts the whole
// job (MPI_Abort), so no peer waits forever in a collective.
int runMpiMain(int argc, char** argv, int (*body)(MpiJob& job, int argc, char** argv));

}  // namespace kolo::bench
