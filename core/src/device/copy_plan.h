// Host-side planning for the batched copy kernel (batched_copy.h): which
// launch and which chunk of it copies which part of which tensor. No CUDA
// headers: the plan is plain data, unit-tested without a GPU, and the host
// device runtime executes the same plan chunk by chunk.
//
// A launch's descriptors travel by value as a kernel parameter (CUDA 12.1+
// allows 32764 bytes of parameters on sm_70 and newer), so a launch holds
// at most kMaxDescsPerLaunch of them; a longer list is split into several
// launches on the same stream. Chunks never straddle two tensors, and every
// chunk starts at a multiple of chunkElements inside its tensor, so when a
// tensor's source and destination share their alignment modulo 16 bytes,
// every chunk of it can use 16-byte vector loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kolo/types.h"

namespace kolo::device {

// One tensor to copy: count elements from src to dst. src == nullptr means
// "fill dst with the launch's fill value" (a joined rank's neutral element).
struct CopyDesc {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t count = 0;
};

// What the kernel reads, one per non-empty CopyDesc. Plain old data: a
// launch's descriptors are its kernel parameter, copied byte for byte.
struct DeviceCopyDesc {
  const void* src;
  void* dst;
  uint64_t count;
  uint64_t firstChunk;  // index of this tensor's first chunk in its launch
};
static_assert(sizeof(DeviceCopyDesc) == 32, "DeviceCopyDesc is shared with device code");

// Bytes of kernel parameters a launch may pass (CUDA 12.1+ on sm_70+; the
// kernel refuses to compile for less, batched_copy.cu).
constexpr size_t kMaxKernelParamBytes = 32764;
// Bytes of the launch's other parameters (descriptor count, chunk size,
// fill bits, the element transform), with room to spare; batched_copy.cu
// checks the real size of every kernel's parameter block.
constexpr size_t kKernelParamOverheadBytes = 128;
// Descriptors one launch holds: the large tier, and a small tier for the
// common launch of a few tensors (1 KiB of parameters instead of 32 KiB).
constexpr uint32_t kMaxDescsPerLaunch = 1000;
constexpr uint32_t kSmallDescsPerLaunch = 32;
static_assert(kMaxDescsPerLaunch * sizeof(DeviceCopyDesc) + kKernelParamOverheadBytes <=
                  kMaxKernelParamBytes,
              "a launch's descriptors must fit in the kernel parameter space");
static_assert(kSmallDescsPerLaunch <= kMaxDescsPerLaunch, "tiers out of order");

// Threads per block of the kernel; a block copies one chunk at a time.
constexpr uint32_t kCopyThreadsPerBlock = 256;

// Default bytes per chunk: large enough to amortise the block's descriptor
// lookup, small enough to spread a single large tensor over every SM.
constexpr size_t kDefaultChunkBytes = 64 * 1024;

// One kernel launch: descs [firstDesc, firstDesc + numDescs) of its plan,
// whose firstChunk count from 0 in this launch, covering chunks chunks.
struct CopyLaunch {
  size_t firstDesc = 0;
  uint32_t numDescs = 0;  // 1 .. kMaxDescsPerLaunch
  uint64_t chunks = 0;
};

struct CopyPlan {
  std::vector<DeviceCopyDesc> descs;  // empty tensors dropped, order kept
  std::vector<CopyLaunch> launches;   // in order; none when nothing is to copy
  uint64_t chunkElements = 0;
  uint64_t chunks = 0;  // over all launches
};

// Splits copies into launches of at most maxDescsPerLaunch non-empty
// tensors each, in order. Throws InvalidArgument for an element size other
// than 1, 2, 4 or 8, a chunk size that is not a positive multiple of 16
// bytes, a maxDescsPerLaunch outside 1 .. kMaxDescsPerLaunch, or a
// non-empty desc with a null dst.
CopyPlan planCopies(const std::vector<CopyDesc>& copies, size_t elementSize,
                    size_t chunkBytes = kDefaultChunkBytes,
                    uint32_t maxDescsPerLaunch = kMaxDescsPerLaunch);

// The descriptor tier a launch of numDescs descriptors uses:
// kSmallDescsPerLaunch or kMaxDescsPerLaunch.
inline uint32_t descTier(uint32_t numDescs) {
  return numDescs <= kSmallDescsPerLaunch ? kSmallDescsPerLaunch : kMaxDescsPerLaunch;
}

// Blocks to launch for chunks chunks on a device with smCount SMs of
// maxThreadsPerSm threads: one per chunk, at most as many as the device
// holds at once (the blocks stride over the rest). At least 1 when
// chunks > 0; 0 for none.
uint32_t copyGridSize(uint64_t chunks, int smCount, int maxThreadsPerSm);

#if defined(__CUDACC__)
#define KOLO_HOST_DEVICE __host__ __device__
#else
#define KOLO_HOST_DEVICE
#endif

// The index of the descriptor whose chunks include chunk: the last i in
// [from, n) with descs[i].firstChunk <= chunk, by binary search. Requires
// descs[from].firstChunk <= chunk (from = 0 for any chunk of a launch, or
// the answer for an earlier chunk). Shared by the kernel (descs in the
// parameter space) and the host runtime; Descs is anything indexable.
template <typename Descs>
KOLO_HOST_DEVICE inline uint32_t descOfChunk(const Descs& descs, uint32_t from, uint32_t n,
                                             uint64_t chunk) {
  uint32_t lo = from, hi = n;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (descs[mid].firstChunk <= chunk) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

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

}  // namespace kolo::device
