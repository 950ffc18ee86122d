// Value types shared by every layer: element types, operations, reduce ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kolo {

enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kInt8 = 6,
  kUInt8 = 7,
  kBool = 8,
  kInt16 = 9,
};
constexpr int kNumDataTypes = 10;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  // Adaptive summation (Maleki et al., MLSys 2021): floating types only;
  // see execution/adasum.h. Never reaches a backend.
  kAdasum = 5,
};
constexpr int kNumReduceOps = 6;

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  // Internal: adding or removing a process set, negotiated on set 0
  // (Engine::addProcessSet / removeProcessSet); never enqueued by users.
  kProcessSet = 7,
};
constexpr int kNumOpTypes = 8;

enum class DeviceKind : uint8_t {
  kCpu = 0,
  kCuda = 1,
};

size_t elementSize(DataType dtype);
bool isFloatingPoint(DataType dtype);
const char* toString(DataType dtype);
const char* toString(ReduceOp op);
const char* toString(OpType op);
const char* toString(DeviceKind device);

// Number of elements of a shape; 1 for a scalar (empty shape).
int64_t numElements(const std::vector<int64_t>& shape);

// "float32[3,4]" style description used in error messages.
std::string describe(DataType dtype, const std::vector<int64_t>& shape);

}  // namespace kolo
