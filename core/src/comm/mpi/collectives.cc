#include "comm/mpi/collectives.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "kolo/error.h"

namespace kolo::comm::mpi {
namespace {

size_t total(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t(0));
}

// Element counts and displacements as MPI's ints; the whole buffer must be
// addressable with int displacements.
std::vector<int> toInts(const std::vector<size_t>& counts, const char* what) {
  KOLO_CHECK_ARG(total(counts) <= static_cast<size_t>(INT_MAX),
                 std::string("mpi ") + what + ": " + std::to_string(total(counts)) +
                     " elements exceed MPI's int counts");
  return std::vector<int>(counts.begin(), counts.end());
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
  return displs;
}

// MPI wants a valid address even for zero elements.
void* orDummy(const void* ptr) {
  static uint64_t dummy;
  return ptr != nullptr ? const_cast<void*>(ptr) : &dummy;
}

}  // namespace

Collectives::Collectives(std::unique_ptr<Context> context, size_t chunkBytes)
    : context_(std::move(context)), chunkBytes_(std::max<size_t>(chunkBytes, 1)) {}

void Collectives::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  const MPI_Op mpiOp = ops_.get(dtype, op);  // rejects bad ops before the network
  const MPI_Datatype type = datatypeOf(dtype);
  context_->checkUsable("allreduce");
  if (count == 0 || context_->size() == 1) return;
  const size_t es = elementSize(dtype);
  const size_t perChunk =
      std::min<size_t>(std::max<size_t>(chunkBytes_ / es, 1), static_cast<size_t>(INT_MAX));
  char* bytes = static_cast<char*>(buf);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(perChunk, count - done);
    MPI_Request req = MPI_REQUEST_NULL;
    context_->check(MPI_Iallreduce(MPI_IN_PLACE, bytes + done * es, static_cast<int>(n), type,
                                   mpiOp, context_->comm(), &req),
                    "allreduce");
    context_->wait(req, "allreduce");
    done += n;
  }
}

void Collectives::allgatherv(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype) {
  checkCounts(counts, "allgatherv");
  const MPI_Datatype type = datatypeOf(dtype);
  context_->checkUsable("allgatherv");
  const size_t es = elementSize(dtype);
  const int me = context_->rank();
  const std::vector<int> ints = toInts(counts, "allgatherv");
  const std::vector<int> displs = displacements(ints);
  // Our own block is placed locally; MPI moves the others (in may alias out).
  if (counts[me] > 0) {
    std::memmove(static_cast<char*>(out) + displs[me] * es, in, counts[me] * es);
  }
  if (total(counts) == 0 || context_->size() == 1) return;
  MPI_Request req = MPI_REQUEST_NULL;
  context_->check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, orDummy(out), ints.data(),
                                  displs.data(), type, context_->comm(), &req),
                  "allgatherv");
  context_->wait(req, "allgatherv");
}

void Collectives::broadcast(void* buf, size_t count, DataType dtype, int root) {
  KOLO_CHECK_ARG(root >= 0 && root < context_->size(),
                 "mpi broadcast: root " + std::to_string(root) + " out of range for size " +
                     std::to_string(context_->size()));
  const MPI_Datatype type = datatypeOf(dtype);
  context_->checkUsable("broadcast");
  if (count == 0 || context_->size() == 1) return;
  const size_t es = elementSize(dtype);
  char* bytes = static_cast<char*>(buf);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(count - done, static_cast<size_t>(INT_MAX));
    MPI_Request req = MPI_REQUEST_NULL;
    context_->check(MPI_Ibcast(bytes + done * es, static_cast<int>(n), type, root,
                               context_->comm(), &req),
                    "broadcast");
    context_->wait(req, "broadcast");
    done += n;
  }
}

void Collectives::alltoallv(const void* in, const std::vector<size_t>& sendCounts, void* out,
                            const std::vector<size_t>& recvCounts, DataType dtype) {
  checkCounts(sendCounts, "alltoallv (send counts)");
  checkCounts(recvCounts, "alltoallv (receive counts)");
  const int me = context_->rank();
  KOLO_CHECK_ARG(sendCounts[me] == recvCounts[me],
                 "mpi alltoallv: rank " + std::to_string(me) + " sends " +
                     std::to_string(sendCounts[me]) + " elements to itself but expects " +
                     std::to_string(recvCounts[me]));
  const MPI_Datatype type = datatypeOf(dtype);
  context_->checkUsable("alltoallv");
  const size_t es = elementSize(dtype);
  if (context_->size() == 1) {
    if (sendCounts[0] > 0) std::memmove(out, in, sendCounts[0] * es);
    return;
  }
  // No early return on empty totals: every rank takes part in the same calls.
  const std::vector<int> sends = toInts(sendCounts, "alltoallv");
  const std::vector<int> recvs = toInts(recvCounts, "alltoallv");
  const std::vector<int> sendDispls = displacements(sends);
  const std::vector<int> recvDispls = displacements(recvs);
  MPI_Request req = MPI_REQUEST_NULL;
  context_->check(MPI_Ialltoallv(orDummy(in), sends.data(), sendDispls.data(), type,
                                 orDummy(out), recvs.data(), recvDispls.data(), type,
                                 context_->comm(), &req),
                  "alltoallv");
  context_->wait(req, "alltoallv");
}

void Collectives::reducescatter(const void* in, void* out, const std::vector<size_t>& recvCounts,
                                DataType dtype, ReduceOp op) {
  checkCounts(recvCounts, "reducescatter");
  const MPI_Op mpiOp = ops_.get(dtype, op);
  const MPI_Datatype type = datatypeOf(dtype);
  context_->checkUsable("reducescatter");
  const size_t es = elementSize(dtype);
  if (context_->size() == 1) {
    if (recvCounts[0] > 0) std::memmove(out, in, recvCounts[0] * es);
    return;
  }
  if (total(recvCounts) == 0) return;
  const std::vector<int> counts = toInts(recvCounts, "reducescatter");
  MPI_Request req = MPI_REQUEST_NULL;
  context_->check(MPI_Ireduce_scatter(orDummy(in), orDummy(out), counts.data(), type, mpiOp,
                                      context_->comm(), &req),
                  "reducescatter");
  context_->wait(req, "reducescatter");
}

void Collectives::checkCounts(const std::vector<size_t>& counts, const char* what) const {
  KOLO_CHECK_ARG(counts.size() == static_cast<size_t>(context_->size()),
                 std::string("mpi ") + what + ": " + std::to_string(counts.size()) +
                     " counts for " + std::to_string(context_->size()) + " ranks");
}

}  // namespace kolo::comm::mpi
