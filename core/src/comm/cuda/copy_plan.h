// Host-side planning for the batched copy kernel (batched_copy.h): which
// thread block copies which part of which tensor. No CUDA headers: the plan
// is plain data, unit-tested without a GPU.
//
// The kernel runs one block per chunk. Chunks never straddle two tensors,
// and every chunk starts at a multiple of chunkElements inside its tensor,
// so when a tensor's source and destination share their alignment modulo
// 16 bytes, every chunk of it can use 16-byte vector loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kolo/types.h"

namespace kolo::comm::cuda {

// One tensor to copy: count elements from src to dst. src == nullptr means
// "fill dst with the launch's fill value" (a joined rank's neutral element).
struct CopyDesc {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t count = 0;
};

// What the kernel reads, one per non-empty CopyDesc. Plain old data: copied
// to the device byte for byte.
struct DeviceCopyDesc {
  const void* src;
  void* dst;
  uint64_t count;
  uint64_t firstChunk;  // index of this tensor's first chunk in the launch
};
static_assert(sizeof(DeviceCopyDesc) == 32, "DeviceCopyDesc is shared with device code");

// Default bytes per chunk (one thread block): large enough to amortise the
// block's descriptor lookup, small enough to spread a single large tensor
// over every SM.
constexpr size_t kDefaultChunkBytes = 64 * 1024;

struct CopyPlan {
  std::vector<DeviceCopyDesc> descs;  // empty tensors dropped, order kept
  uint64_t chunks = 0;                // blocks to launch
  uint64_t chunkElements = 0;
};

// Throws InvalidArgument for a chunk size that is not a positive multiple of
// 16 bytes, or for a non-empty desc with a null dst.
CopyPlan planCopies(const std::vector<CopyDesc>& copies, size_t elementSize,
                    size_t chunkBytes = kDefaultChunkBytes);

// Dense layout of tensors in a fusion buffer: offsets[i] (in elements) of
// tensor i, the same layout the CPU executor uses, so a fused response means
// the same bytes on every rank whatever its device. Returns the total count.
uint64_t packOffsets(const std::vector<uint64_t>& counts, std::vector<uint64_t>& offsets);

// How a launch changes the elements it copies. Decided on the host from the
// dtype so the kernel never sees a meaningless combination.
struct CopyTransform {
  enum class Kind : uint8_t {
    kCopy,    // bytes as they are
    kScale,   // x * scale as kolo::scaleElements does it on the CPU
    kDivide,  // integer types: x / divisor, truncating (integer average)
  };
  Kind kind = Kind::kCopy;
  double scale = 1.0;
  int64_t divisor = 1;
  uint64_t fillBits = 0;  // bit pattern of one element for src == nullptr
};

// kScale when scale != 1 (any dtype but bool), kDivide for an integer dtype
// when divisor != 1, else kCopy. Throws InvalidArgument for a scale of bool,
// a divisor of a floating dtype or of bool, a divisor < 1, or both a scale
// and a divisor (the engine refuses those at enqueue; this is the backstop).
CopyTransform makeTransform(DataType dtype, double scale, int64_t divisor = 1);

// The element bits of the identity of op for dtype (0 for sum, 1 for
// product, +inf/max for min, -inf/lowest for max; bool: OR/AND identities).
uint64_t neutralBits(DataType dtype, ReduceOp op);

}  // namespace kolo::comm::cuda
