// Where a negotiated response's rows go: the element counts per rank and
// the output shape of allgather, alltoall and reducescatter; and where each
// tensor of a fused allreduce lies in the fusion buffer. Shared by the CPU
// executor, the GPU path and the fusion planner, so all of them (and every
// rank) read Response::rankDims and lay out fused buffers the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "wire/message.h"

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

// Where each tensor of a fused CUDA allreduce starts in its fusion buffer
// is a multiple of this many bytes (the buffer itself is at least 256-byte
// aligned), so the pack kernel copies every tensor whose own address is
// 16-byte aligned (any caching allocator's) with 16-byte vector loads, never
// element by element. CPU fusion buffers stay dense: memcpy does not care.
constexpr size_t kGpuFusionAlignBytes = 16;

// The alignment of tensors' offsets in a fusion buffer of device's responses:
// kGpuFusionAlignBytes for CUDA, 1 (dense) for the CPU.
size_t fusionAlignment(DeviceKind device);

// Bytes a tensor of count elements of elementSize takes in a fusion buffer
// whose offsets are multiples of alignBytes: its bytes rounded up to one.
uint64_t fusedBytes(uint64_t count, size_t elementSize, size_t alignBytes);

// The layout of a fused buffer: offsets[i] (in elements) where tensor i
// starts, each the first multiple of alignBytes at or after the end of
// tensor i - 1, and total, the elements the buffer holds (end of the last
// tensor; the collective runs over all of them, gaps included: nothing
// reads a gap back). A function of its arguments only, so every rank that
// executes a response computes the same layout. alignBytes must be a
// positive multiple or divisor of elementSize (a divisor: dense), else
// InvalidArgument. fusedBytes
// of all tensors is at least total * elementSize, so a planner that bounds
// their sum bounds the buffer.
struct FusionLayout {
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
};
FusionLayout fusionLayout(const std::vector<uint64_t>& counts, size_t elementSize,
                          size_t alignBytes);

}  // namespace kolo
