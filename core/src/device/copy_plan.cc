#include "device/copy_plan.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "device/memory_policy.h"
#include "kolo/error.h"

namespace kolo::device {
namespace {

template <typename T>
uint64_t bitsOf(T value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}

template <typename T>
uint64_t extremeBits(bool forMin) {
  if (std::numeric_limits<T>::has_infinity) {
    return bitsOf<T>(forMin ? std::numeric_limits<T>::infinity()
                            : -std::numeric_limits<T>::infinity());
  }
  return bitsOf<T>(forMin ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest());
}

}  // namespace

CopyPlan planCopies(const std::vector<CopyDesc>& copies, size_t elementSize, size_t chunkBytes,
                    uint32_t maxDescsPerLaunch) {
  KOLO_CHECK_ARG(elementSize == 1 || elementSize == 2 || elementSize == 4 || elementSize == 8,
                 "batched copy: element size " + std::to_string(elementSize) + " not supported");
  KOLO_CHECK_ARG(chunkBytes >= 16 && chunkBytes % 16 == 0,
                 "batched copy: chunk size " + std::to_string(chunkBytes) +
                     " bytes is not a positive multiple of 16");
  KOLO_CHECK_ARG(maxDescsPerLaunch >= 1 && maxDescsPerLaunch <= kMaxDescsPerLaunch,
                 "batched copy: " + std::to_string(maxDescsPerLaunch) +
                     " descriptors per launch is outside 1.." + std::to_string(kMaxDescsPerLaunch));
  CopyPlan plan;
  plan.chunkElements = chunkBytes / elementSize;
  plan.descs.reserve(copies.size());
  CopyLaunch* launch = nullptr;  // the launch being filled
  for (size_t i = 0; i < copies.size(); ++i) {
    const CopyDesc& c = copies[i];
    if (c.count == 0) continue;
    KOLO_CHECK_ARG(c.dst != nullptr,
                   "batched copy: tensor " + std::to_string(i) + " has no destination");
    if (launch == nullptr || launch->numDescs == maxDescsPerLaunch) {
      plan.launches.push_back(CopyLaunch{plan.descs.size(), 0, 0});
      launch = &plan.launches.back();
    }
    const uint64_t chunks = (c.count + plan.chunkElements - 1) / plan.chunkElements;
    plan.descs.push_back(DeviceCopyDesc{c.src, c.dst, c.count, launch->chunks});
    launch->numDescs += 1;
    launch->chunks += chunks;
    plan.chunks += chunks;
  }
  return plan;
}

uint32_t copyGridSize(uint64_t chunks, int smCount, int maxThreadsPerSm) {
  const uint64_t perSm = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::max(maxThreadsPerSm, 0)) / kCopyThreadsPerBlock);
  const uint64_t bound = perSm * static_cast<uint64_t>(std::max(smCount, 1));
  return static_cast<uint32_t>(std::min(chunks, bound));
}

CopyTransform makeTransform(DataType dtype, double scale, int64_t divisor) {
  CopyTransform t;
  KOLO_CHECK_ARG(divisor >= 1, "batched copy: divisor " + std::to_string(divisor) + " < 1");
  KOLO_CHECK_ARG(divisor == 1 || !isFloatingPoint(dtype),
                 std::string("batched copy: integer divisor for ") + toString(dtype) +
                     " (use a scale)");
  KOLO_CHECK_ARG(dtype != DataType::kBool || (scale == 1.0 && divisor == 1),
                 "batched copy: cannot scale or divide bool");
  KOLO_CHECK_ARG(scale == 1.0 || divisor == 1,
                 "batched copy: a scale and a divisor in one transform");
  if (scale != 1.0) {
    t.kind = CopyTransform::Kind::kScale;
    t.scale = scale;
  } else if (divisor != 1) {
    t.kind = CopyTransform::Kind::kDivide;
    t.divisor = divisor;
  }
  return t;
}

uint64_t neutralBits(DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kAdasum) return 0;
  if (op == ReduceOp::kProduct) {
    switch (dtype) {
      case DataType::kFloat32: return bitsOf(1.0f);
      case DataType::kFloat64: return bitsOf(1.0);
      case DataType::kFloat16: return 0x3c00;
      case DataType::kBFloat16: return 0x3f80;
      case DataType::kInt32:
      case DataType::kInt64:
      case DataType::kInt16:
      case DataType::kInt8:
      case DataType::kUInt8:
      case DataType::kBool: return 1;  // little-endian: low byte(s) hold 1
    }
  }
  const bool forMin = op == ReduceOp::kMin;
  KOLO_CHECK_ARG(forMin || op == ReduceOp::kMax,
                 std::string("neutral element: unknown reduce op ") + toString(op));
  switch (dtype) {
    case DataType::kFloat32: return extremeBits<float>(forMin);
    case DataType::kFloat64: return extremeBits<double>(forMin);
    case DataType::kFloat16: return forMin ? 0x7c00 : 0xfc00;
    case DataType::kBFloat16: return forMin ? 0x7f80 : 0xff80;
    case DataType::kInt32: return extremeBits<int32_t>(forMin);
    case DataType::kInt64: return extremeBits<int64_t>(forMin);
    case DataType::kInt16: return extremeBits<int16_t>(forMin);
    case DataType::kInt8: return extremeBits<int8_t>(forMin);
    case DataType::kUInt8: return extremeBits<uint8_t>(forMin);
    case DataType::kBool: return forMin ? 1 : 0;
  }
  throw InvalidArgument("neutral element: unknown dtype " +
                        std::to_string(static_cast<int>(dtype)));
}

size_t grownCapacity(size_t capacity, size_t request) {
  constexpr size_t kGrain = size_t(1) << 20;
  if (request <= capacity) return capacity;
  const size_t wanted = std::max(request, capacity + capacity / 2);
  return (wanted + kGrain - 1) / kGrain * kGrain;
}

}  // namespace kolo::device
