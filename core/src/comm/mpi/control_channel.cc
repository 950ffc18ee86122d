#include "comm/mpi/control_channel.h"

#include <climits>
#include <cstddef>
#include <string>
#include <utility>

#include "kolo/error.h"

namespace kolo::comm::mpi {
namespace {

int intCount(size_t n, const char* what) {
  KOLO_CHECK_ARG(n <= static_cast<size_t>(INT_MAX),
                 std::string("mpi ") + what + ": " + std::to_string(n) +
                     " bytes exceed MPI's int count");
  return static_cast<int>(n);
}

// MPI wants a valid address even for zero bytes.
char* orDummy(char* ptr) {
  static char dummy;
  return ptr != nullptr ? ptr : &dummy;
}

}  // namespace

ControlChannel::ControlChannel(std::unique_ptr<Context> context)
    : context_(std::move(context)) {}

void ControlChannel::allreduceAnd(std::vector<uint64_t>& bits) { allreduceBits(bits, true); }

void ControlChannel::allreduceOr(std::vector<uint64_t>& bits) { allreduceBits(bits, false); }

void ControlChannel::allreduceBits(std::vector<uint64_t>& bits, bool isAnd) {
  const char* what = isAnd ? "allreduce(and)" : "allreduce(or)";
  context_->checkUsable(what);
  if (size() == 1 || bits.empty()) return;
  MPI_Request req = MPI_REQUEST_NULL;
  context_->check(MPI_Iallreduce(MPI_IN_PLACE, bits.data(), intCount(bits.size(), what),
                                 MPI_UINT64_T, isAnd ? MPI_BAND : MPI_BOR, context_->comm(),
                                 &req),
                  what);
  context_->wait(req, what);
}

std::vector<std::vector<char>> ControlChannel::gatherv(const std::vector<char>& mine,
                                                       int root) {
  checkRoot(root, "gatherv");
  context_->checkUsable("gatherv");
  const int me = rank();
  const int n = size();
  std::vector<std::vector<char>> result;
  if (me == root) result.resize(n);
  if (n == 1) {
    result[0] = mine;
    return result;
  }
  // Step 1: the root learns every length.
  uint64_t myLength = mine.size();
  std::vector<uint64_t> lengths(me == root ? n : 0);
  MPI_Request req = MPI_REQUEST_NULL;
  context_->check(MPI_Igather(&myLength, 1, MPI_UINT64_T, lengths.data(), 1, MPI_UINT64_T, root,
                              context_->comm(), &req),
                  "gatherv");
  context_->wait(req, "gatherv");
  // Step 2: the payloads, into one contiguous buffer at the root.
  std::vector<int> counts, displs;
  std::vector<char> all;
  if (me == root) {
    counts.resize(n);
    displs.resize(n);
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      counts[r] = intCount(lengths[r], "gatherv");
      displs[r] = intCount(total, "gatherv");
      total += lengths[r];
    }
    intCount(total, "gatherv");
    all.resize(total);
  }
  context_->check(MPI_Igatherv(orDummy(const_cast<char*>(mine.data())),
                               intCount(mine.size(), "gatherv"), MPI_BYTE, orDummy(all.data()),
                               counts.data(), displs.data(), MPI_BYTE, root, context_->comm(),
                               &req),
                  "gatherv");
  context_->wait(req, "gatherv");
  if (me == root) {
    for (int r = 0; r < n; ++r) {
      result[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
    }
  }
  return result;
}

void ControlChannel::broadcast(std::vector<char>& bytes, int root) {
  checkRoot(root, "broadcast");
  context_->checkUsable("broadcast");
  if (size() == 1) return;
  uint64_t length = bytes.size();
  MPI_Request req = MPI_REQUEST_NULL;
  context_->check(MPI_Ibcast(&length, 1, MPI_UINT64_T, root, context_->comm(), &req),
                  "broadcast");
  context_->wait(req, "broadcast");
  if (rank() != root) bytes.resize(length);
  if (length == 0) return;
  context_->check(MPI_Ibcast(bytes.data(), intCount(length, "broadcast"), MPI_BYTE, root,
                             context_->comm(), &req),
                  "broadcast");
  context_->wait(req, "broadcast");
}

void ControlChannel::barrier() {
  context_->checkUsable("barrier");
  if (size() == 1) return;
  MPI_Request req = MPI_REQUEST_NULL;
  context_->check(MPI_Ibarrier(context_->comm(), &req), "barrier");
  context_->wait(req, "barrier");
}

void ControlChannel::checkRoot(int root, const char* what) const {
  KOLO_CHECK_ARG(root >= 0 && root < size(),
                 std::string("mpi ") + what + ": root " + std::to_string(root) +
                     " out of range for size " + std::to_string(size()));
}

}  // namespace kolo::comm::mpi
