// Argument checks and block layouts shared by the NCCL collectives. Host
// logic, tested without a GPU.
#pragma once

#include <cstddef>
#include <vector>

namespace kolo::comm::nccl {

// Throws InvalidArgument ("nccl allgatherv: 3 counts for size 2") unless
// there is one count per rank.
void checkCounts(const std::vector<size_t>& counts, int size, const char* what);
void checkRoot(int root, int size, const char* what);
// alltoallv: both count vectors have one entry per rank, and what rank sends
// to itself equals what it expects from itself.
void checkAlltoall(const std::vector<size_t>& sendCounts, const std::vector<size_t>& recvCounts,
                   int rank, int size);

// Element offset of each rank's block (exclusive prefix sum).
std::vector<size_t> blockOffsets(const std::vector<size_t>& counts);
size_t total(const std::vector<size_t>& counts);
// True when every count is the same: the single-call NCCL collective
// (ncclAllGather, ncclReduceScatter) applies; else grouped per-rank calls.
bool allEqual(const std::vector<size_t>& counts);

}  // namespace kolo::comm::nccl
