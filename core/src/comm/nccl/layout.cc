#include "comm/nccl/layout.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "kolo/error.h"

namespace kolo::comm::nccl {

void checkCounts(const std::vector<size_t>& counts, int size, const char* what) {
  KOLO_CHECK_ARG(counts.size() == static_cast<size_t>(size),
                 std::string("nccl ") + what + ": " + std::to_string(counts.size()) +
                     " counts for size " + std::to_string(size));
}

void checkRoot(int root, int size, const char* what) {
  KOLO_CHECK_ARG(root >= 0 && root < size, std::string("nccl ") + what + ": root " +
                                               std::to_string(root) + " out of range for size " +
                                               std::to_string(size));
}

void checkAlltoall(const std::vector<size_t>& sendCounts, const std::vector<size_t>& recvCounts,
                   int rank, int size) {
  checkCounts(sendCounts, size, "alltoallv (send counts)");
  checkCounts(recvCounts, size, "alltoallv (receive counts)");
  KOLO_CHECK_ARG(sendCounts[rank] == recvCounts[rank],
                 "nccl alltoallv: rank " + std::to_string(rank) + " sends " +
                     std::to_string(sendCounts[rank]) + " elements to itself but expects " +
                     std::to_string(recvCounts[rank]));
}

std::vector<size_t> blockOffsets(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

size_t total(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t(0));
}

bool allEqual(const std::vector<size_t>& counts) {
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<size_t>()) ==
         counts.end();
}

}  // namespace kolo::comm::nccl
