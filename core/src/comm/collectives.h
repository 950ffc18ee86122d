// Collectives: the data plane, one implementation per backend (comm/gloo,
// comm/mpi, comm/nccl). Works on raw buffers; counts are in elements.
//
// Threading: called from the engine's background thread only, every rank in
// the same order. Reduce ops are kSum, kMin, kMax and kProduct: the engine
// turns kAverage into kSum plus a postscale before calling here. Errors
// throw PeerFailure or Timeout like ControlChannel.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "kolo/error.h"
#include "kolo/types.h"

namespace kolo::comm {

class Collectives {
 public:
  virtual ~Collectives() = default;

  // Short backend name for messages and timelines ("gloo", "mpi", "nccl").
  virtual const char* name() const = 0;

  // In place on buf.
  virtual void allreduce(void* buf, size_t count, DataType dtype,
                         ReduceOp op) = 0;

  // allreduce, then every element times factor, rounded as scaleElements
  // rounds (the engine's average and postscale, floating dtypes). Planes
  // that can fold the multiply into their own last pass over the data (shm)
  // override it; the others make one more pass.
  virtual void allreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                               double factor) {
    allreduce(buf, count, dtype, op);
    scaleElements(buf, count, dtype, factor);
  }

  // in holds counts[rank] elements; out receives every rank's block in rank
  // order (sum(counts) elements).
  virtual void allgatherv(const void* in, void* out,
                          const std::vector<size_t>& counts,
                          DataType dtype) = 0;

  // In place on buf; root's contents win.
  virtual void broadcast(void* buf, size_t count, DataType dtype,
                         int root) = 0;

  // Sends sendCounts[r] elements (consecutive blocks of in, in rank order) to
  // rank r; receives recvCounts[r] elements from rank r into out, in rank
  // order.
  virtual void alltoallv(const void* in, const std::vector<size_t>& sendCounts,
                         void* out, const std::vector<size_t>& recvCounts,
                         DataType dtype) = 0;

  // Reduces in (sum(recvCounts) elements) across ranks and leaves block
  // `rank` (recvCounts[rank] elements) in out.
  virtual void reducescatter(const void* in, void* out,
                             const std::vector<size_t>& recvCounts,
                             DataType dtype, ReduceOp op) = 0;

  // Two-level allreduce across hosts (comm/hierarchical): whether this plane
  // can switch it, whether it is on, and switching it between operations
  // (the autotuner's choice: the same on every rank at the same point).
  virtual bool canSwitchTwoLevelAllreduce() const { return false; }
  virtual bool twoLevelAllreduce() const { return false; }
  virtual void setTwoLevelAllreduce(bool) {}

  // Planes whose collectives finish after the call returns (NCCL: on the
  // device): the first asynchronous failure (ok while none), and stopping
  // the work in flight after one. Unlike the rest, any thread may call
  // these (the GPU path's completion watcher does).
  virtual Status asyncError() { return Status::Ok(); }
  virtual void abortAsync() {}
  // abortAsync, saying why, for planes that can pass it to their peers
  // (the host device runtime's collectives); the others just abort.
  virtual void abortWith(const Status& why) {
    (void)why;
    abortAsync();
  }

  // What ControlChannel::abandon does, for this plane's connections. Loop
  // thread only; never throws. Planes without connections of their own to
  // close (MPI, the GPU planes, which abortAsync stops) do nothing.
  virtual void abandon(const std::string& why) { (void)why; }
};

}  // namespace kolo::comm
