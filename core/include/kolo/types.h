/// \file
/// Value types shared by every layer: element types, operations, reduce ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kolo {

/// Element type of a tensor. The numeric values travel between ranks in
/// negotiation messages, so they are fixed.
enum class DataType : uint8_t {
  kFloat32 = 0,   ///< IEEE float, 4 bytes.
  kFloat64 = 1,   ///< IEEE double, 8 bytes.
  kFloat16 = 2,   ///< IEEE half, 2 bytes.
  kBFloat16 = 3,  ///< bfloat16, 2 bytes.
  kInt32 = 4,     ///< Signed 32-bit integer.
  kInt64 = 5,     ///< Signed 64-bit integer.
  kInt8 = 6,      ///< Signed 8-bit integer.
  kUInt8 = 7,     ///< Unsigned 8-bit integer.
  kBool = 8,      ///< One byte per element, 0 or 1.
  kInt16 = 9,     ///< Signed 16-bit integer.
};
/// Number of DataType values (for tables indexed by dtype).
constexpr int kNumDataTypes = 10;

/// How allreduce and reducescatter combine the ranks' tensors.
enum class ReduceOp : uint8_t {
  kSum = 0,      ///< Elementwise sum.
  kAverage = 1,  ///< Sum divided by the set's size (integers: truncated).
  kMin = 2,      ///< Elementwise minimum.
  kMax = 3,      ///< Elementwise maximum.
  kProduct = 4,  ///< Elementwise product.
  /// Adaptive summation (Maleki et al., MLSys 2021): allreduce of floating
  /// types on the CPU only (InvalidArgument otherwise); see
  /// execution/adasum.h. Never reaches a backend.
  kAdasum = 5,
};
/// Number of ReduceOp values.
constexpr int kNumReduceOps = 6;

/// The kind of a collective operation (Request::op).
enum class OpType : uint8_t {
  kAllreduce = 0,      ///< Elementwise reduction; every rank gets the result.
  kAllgather = 1,      ///< Concatenation of every rank's rows (dim 0).
  kBroadcast = 2,      ///< The root's tensor on every rank.
  kAlltoall = 3,       ///< Rows scattered to and gathered from every rank.
  kReducescatter = 4,  ///< Reduction; each rank keeps its share of dim 0.
  kBarrier = 5,        ///< No data; completes when every rank arrived.
  kJoin = 6,           ///< This rank ran out of data (Engine::join).
  /// Internal: adding or removing a process set, negotiated on set 0
  /// (Engine::addProcessSet / removeProcessSet); never enqueued by users.
  kProcessSet = 7,
};
/// Number of OpType values.
constexpr int kNumOpTypes = 8;

/// Where a tensor's memory lives.
enum class DeviceKind : uint8_t {
  kCpu = 0,   ///< Host memory.
  kCuda = 1,  ///< CUDA device memory (Request::deviceIndex names the device).
};

/// Bytes per element of dtype; throws InvalidArgument for a value outside
/// the enum.
size_t elementSize(DataType dtype);
/// True for float32, float64, float16 and bfloat16.
bool isFloatingPoint(DataType dtype);
/// Lower-case name ("float32", "bfloat16", ...); "unknown-dtype" for values
/// outside the enum. The returned string is static.
const char* toString(DataType dtype);
/// Name of a reduce op as error messages spell it; static storage.
const char* toString(ReduceOp op);
/// Name of an operation kind as error messages spell it; static storage.
const char* toString(OpType op);
/// "cpu" or "cuda"; static storage.
const char* toString(DeviceKind device);

/// Number of elements of a shape; 1 for a scalar (empty shape).
int64_t numElements(const std::vector<int64_t>& shape);

/// "float32[3,4]" style description used in error messages.
std::string describe(DataType dtype, const std::vector<int64_t>& shape);

}  // namespace kolo
