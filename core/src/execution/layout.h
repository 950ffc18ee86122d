// Where a negotiated response's rows go: the element counts per rank and
// the output shape of allgather, alltoall and reducescatter. Shared by the
// CPU executor and the GPU path, so both read Response::rankDims the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "negotiation/message.h"

namespace kolo {

// Elements per row (the product of every dimension but the first).
int64_t rowElements(const std::vector<int64_t>& shape);

// Even split of rows over ranks; the first (rows % size) ranks get one more.
std::vector<size_t> evenSplit(int64_t rows, int size);

// Allgather: counts[i] elements come from rank i; shape is the output's.
struct GatherLayout {
  std::vector<size_t> counts;
  std::vector<int64_t> shape;
};
GatherLayout gatherLayout(const Response& r, int size);

// Alltoall on rank `me` of `size`: elements sent to and received from each
// rank, rows received from each rank, and the rows received in all.
struct AlltoallLayout {
  std::vector<size_t> send;
  std::vector<size_t> recv;
  std::vector<int64_t> receivedRows;
  int64_t rows = 0;
};
AlltoallLayout alltoallLayout(const Response& r, int me, int size);

}  // namespace kolo
