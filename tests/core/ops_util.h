// Helpers for engine tests: typed buffers for every dtype and references.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kolo/engine.h"
#include "kernels/reduce.h"

namespace kolo::test {

// Small-integer value for (rank, index) exactly representable in every
// dtype (|v| <= 7, sums of up to 8 ranks stay exact in fp16/bf16/int8).
inline double valueFor(int rank, size_t i, DataType dtype, ReduceOp op = ReduceOp::kSum) {
  if (op == ReduceOp::kProduct && dtype != DataType::kBool) {
    // -1, 0, 1 (0, 1 for unsigned): products stay exact and in range.
    int v = static_cast<int>((rank + i) % 3) - 1;
    return dtype == DataType::kUInt8 ? (v < 0 ? 1 : v) : v;
  }
  if (dtype == DataType::kBool) return static_cast<double>((rank + i) % 3 == 0);
  if (dtype == DataType::kUInt8) return static_cast<double>((rank * 3 + i) % 5);
  return static_cast<double>(static_cast<int>((rank * 7 + i * 3) % 9) - 4);
}

inline void store(DataType dtype, void* buf, size_t i, double v) {
  switch (dtype) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToBfloat16(static_cast<float>(v));
      break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kInt16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case DataType::kInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::kBool: static_cast<uint8_t*>(buf)[i] = v != 0; break;
  }
}

inline double load(DataType dtype, const void* buf, size_t i) {
  switch (dtype) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return halfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return bfloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kInt16: return static_cast<const int16_t*>(buf)[i];
    case DataType::kInt8: return static_cast<const int8_t*>(buf)[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kBool: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

// A buffer of n elements of dtype filled with valueFor(rank, i).
inline std::vector<char> makeBuffer(DataType dtype, size_t n, int rank,
                                    ReduceOp op = ReduceOp::kSum) {
  std::vector<char> buf(n * elementSize(dtype) + 1);
  for (size_t i = 0; i < n; ++i) store(dtype, buf.data(), i, valueFor(rank, i, dtype, op));
  return buf;
}

// Reference reduction of valueFor over size ranks at index i.
inline double reference(ReduceOp op, DataType dtype, int size, size_t i) {
  double acc = valueFor(0, i, dtype, op);
  for (int r = 1; r < size; ++r) {
    double v = valueFor(r, i, dtype, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kProduct: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (dtype == DataType::kBool) {
    if (op == ReduceOp::kSum || op == ReduceOp::kMax) return acc != 0;
    if (op == ReduceOp::kProduct) return acc != 0;
  }
  if (op == ReduceOp::kAverage) {
    if (isFloatingPoint(dtype)) return acc / size;
    return static_cast<double>(static_cast<int64_t>(acc) / size);
  }
  return acc;
}

// Wraps the integer result the way the dtype stores it (int8/uint8 wrap).
inline double wrapTo(DataType dtype, double v) {
  std::vector<char> tmp(16);
  store(dtype, tmp.data(), 0, v);
  return load(dtype, tmp.data(), 0);
}

inline Request makeRequest(const std::string& name, OpType op, DataType dtype,
                           std::vector<int64_t> shape, ReduceOp reduceOp = ReduceOp::kSum) {
  Request q;
  q.name = name;
  q.op = op;
  q.dtype = dtype;
  q.shape = std::move(shape);
  q.reduceOp = reduceOp;
  return q;
}

inline Entry inPlace(std::vector<char>& buf) {
  Entry e;
  e.input = buf.data();
  e.output = buf.data();
  return e;
}

}  // namespace kolo::test
