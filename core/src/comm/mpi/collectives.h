// The CPU data plane over MPI: MPI's own allreduce, allgatherv, broadcast,
// alltoallv and reduce-scatter, started non-blocking and bounded by
// Config::timeout (context.h). float16/bfloat16/bool reduce through
// user-defined ops (datatype.h).
//
// Large allreduces are split into pieces of at most chunkBytes: OpenMPI
// 4.1's allreduce allocates its temporaries per call, and above a few MB
// those are fresh mmaps (page faults on every call), which makes one 64 MB
// allreduce several times slower than sixteen 4 MB ones. Its non-blocking
// allreduce (libnbc) is fastest with pieces of 0.5-2 MiB: 64 MB, 2 ranks,
// busbw 3.1-3.8 GB/s at 1 MiB vs 1.8-2.1 at 4 MiB (docs/benchmarks.md, "MPI in
// pieces", has the measurements).
//
// Threading: as comm::Collectives (one calling thread, same order on every
// rank).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/collectives.h"
#include "comm/mpi/context.h"
#include "comm/mpi/datatype.h"

namespace kolo::comm::mpi {

// Default allreduce piece size.
constexpr size_t kAllreduceChunkBytes = size_t(1) << 20;

class Collectives final : public comm::Collectives {
 public:
  explicit Collectives(std::unique_ptr<Context> context,
                       size_t chunkBytes = kAllreduceChunkBytes);

  const char* name() const override { return "mpi"; }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype) override;
  void broadcast(void* buf, size_t count, DataType dtype, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                 const std::vector<size_t>& recvCounts, DataType dtype) override;
  void reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                     DataType dtype, ReduceOp op) override;

 private:
  void checkCounts(const std::vector<size_t>& counts, const char* what) const;

  std::unique_ptr<Context> context_;  // first: outlives ops_
  OpTable ops_;
  const size_t chunkBytes_;
};

}  // namespace kolo::comm::mpi
