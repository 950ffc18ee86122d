// The allreduce paths the benchmarks compare, behind one interface:
//
//   mpi               one MPI_Allreduce per tensor (MPI_COMM_WORLD)
//   mpi-1MiB-pieces   the same, each tensor in 1 MiB calls (as kolo's mpi backend)
//   gloo              one gloo::allreduce per tensor: a gloo::rendezvous::Context
//                     on the tcp transport, connected through the job's TCP store
//   kolo-mpi          a kolo::Engine with controller and CPU operations on MPI
//   kolo-gloo         a kolo::Engine on Gloo (rendezvous through the job's TCP store)
//   kolo-shm          a kolo::Engine with its defaults: ranks of one host share memory
//
// Each is built for one block of timed calls and destroyed after it, so no
// engine idles (an idle engine still runs a coordination round every cycle)
// while another method is timed, and no raw MPI call overlaps kolo's MPI
// thread.
//
// Threading: main thread only. Construction and destruction are collective.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kolo/engine.h"
#include "mpi_job.h"

namespace kolo::bench {

// A float32 tensor reduced in place (sum). name and shape are what kolo
// negotiates; raw paths only use data and count.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;
  size_t count = 0;
};

class Allreducer {
 public:
  virtual ~Allreducer() = default;
  // Sums every tensor over all ranks, in place; returns when all are done
  // on this rank. Every rank passes the same list.
  virtual void allreduce(const std::vector<Tensor>& tensors) = 0;
  // Returns once every rank got here.
  virtual void barrier() = 0;
};

// The method names above.
const std::vector<std::string>& allreducerNames();

// Builds the named method. Collective.
std::unique_ptr<Allreducer> makeAllreducer(const std::string& method, MpiJob& job);

// How many calls fit in budgetSeconds, agreed by all ranks: each passes the
// seconds one call took here (e.g. its last warm-up call), the ranks average
// them with one 4-byte allreduce through ar itself (so no other channel is
// needed while an engine runs), and every rank gets the same
// clamp(budget / mean, least, most). Collective.
int agreeOnCalls(Allreducer& ar, int worldSize, double secondsPerCall, double budgetSeconds,
                 int least, int most);

// Engine counters of a kolo method; all zero for raw methods.
kolo::EngineStats statsOf(const Allreducer& a);

}  // namespace kolo::bench
