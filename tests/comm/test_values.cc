#include "comm/test_values.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "kolo/shareable.h"

namespace kolo::test {

const DataType kAllDataTypes[kNumDataTypes] = {
    DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
    DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
    DataType::kInt8,     DataType::kUInt8,   DataType::kBool,
    DataType::kInt16};
const ReduceOp kReduceOps[4] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

namespace {

bool isUnsigned(DataType dtype) { return dtype == DataType::kUInt8 || dtype == DataType::kBool; }

void requireSmallInteger(double v) {
  if (v != std::floor(v) || std::fabs(v) > 2048) {
    throw std::logic_error("test value not a small integer: " + std::to_string(v));
  }
}

uint16_t encodeHalf(double v) {
  requireSmallInteger(v);
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  double m = std::fabs(v);
  int e = 0;
  while (m >= 2) {
    m /= 2;
    ++e;
  }
  const double mant = (m - 1) * 1024;
  if (mant != std::floor(mant)) throw std::logic_error("not exact in float16");
  return sign | static_cast<uint16_t>((e + 15) << 10) | static_cast<uint16_t>(mant);
}

double decodeHalf(uint16_t h) {
  const double sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 0x1f) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

uint16_t encodeBFloat16(double v) {
  requireSmallInteger(v);
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (bits & 0xffff) throw std::logic_error("not exact in bfloat16");
  return static_cast<uint16_t>(bits >> 16);
}

double decodeBFloat16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T>
void put(char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

template <typename T>
T take(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

TypedBuffer::TypedBuffer(DataType dtype, size_t count)
    : dtype_(dtype),
      count_(count),
      elementSize_(elementSize(dtype)),
      bytes_(count * elementSize_, 0) {}

ShareableBuffer::ShareableBuffer(DataType dtype, size_t count)
    : values(dtype, count), block(allocateShareable(count * elementSize(dtype))) {}

size_t ShareableBuffer::bytes() const { return values.count() * elementSize(values.dtype()); }

void ShareableBuffer::in() { std::memcpy(block.get(), values.data(), bytes()); }

void ShareableBuffer::out() { std::memcpy(values.data(), block.get(), bytes()); }

void TypedBuffer::set(size_t i, double v) {
  char* p = bytes_.data() + i * elementSize_;
  switch (dtype_) {
    case DataType::kFloat32:
      return put(p, static_cast<float>(v));
    case DataType::kFloat64:
      return put(p, v);
    case DataType::kFloat16:
      return put(p, encodeHalf(v));
    case DataType::kBFloat16:
      return put(p, encodeBFloat16(v));
    case DataType::kInt32:
      return put(p, static_cast<int32_t>(v));
    case DataType::kInt64:
      return put(p, static_cast<int64_t>(v));
    case DataType::kInt16:
      return put(p, static_cast<int16_t>(v));
    case DataType::kInt8:
      return put(p, static_cast<int8_t>(v));
    case DataType::kUInt8:
      return put(p, static_cast<uint8_t>(v));
    case DataType::kBool:
      return put(p, static_cast<uint8_t>(v != 0));
  }
}

double TypedBuffer::get(size_t i) const {
  const char* p = bytes_.data() + i * elementSize_;
  switch (dtype_) {
    case DataType::kFloat32:
      return take<float>(p);
    case DataType::kFloat64:
      return take<double>(p);
    case DataType::kFloat16:
      return decodeHalf(take<uint16_t>(p));
    case DataType::kBFloat16:
      return decodeBFloat16(take<uint16_t>(p));
    case DataType::kInt32:
      return take<int32_t>(p);
    case DataType::kInt64:
      return static_cast<double>(take<int64_t>(p));
    case DataType::kInt16:
      return take<int16_t>(p);
    case DataType::kInt8:
      return take<int8_t>(p);
    case DataType::kUInt8:
      return take<uint8_t>(p);
    // Raw byte: a backend that leaves 2 where a bool should be is wrong.
    case DataType::kBool:
      return take<uint8_t>(p);
  }
  return NAN;
}

double reduceInput(DataType dtype, ReduceOp op, int rank, size_t i) {
  const size_t r = static_cast<size_t>(rank);
  if (dtype == DataType::kBool) {
    if (op == ReduceOp::kSum || op == ReduceOp::kMax) return (r + i) % 3 == 0;
    return (r + i) % 5 != 0;
  }
  const bool unsignedType = isUnsigned(dtype);
  switch (op) {
    case ReduceOp::kProduct: {
      // At most 2 of 8 ranks contribute a 2: |product| <= 4 fits int8.
      const size_t k = (r + i) % 4;
      if (k == 0) return 2;
      return (k == 1 && !unsignedType) ? -1 : 1;
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax: {
      const double v = static_cast<double>((r * 5 + i * 3) % 11);
      return unsignedType ? v : v - 5;
    }
    default: {
      const double v = static_cast<double>((r * 7 + i * 3) % 5);
      return unsignedType ? v : v - 2;
    }
  }
}

double reduceExpected(DataType dtype, ReduceOp op, int n, size_t i) {
  double acc = reduceInput(dtype, op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = reduceInput(dtype, op, r, i);
    const bool orLike = op == ReduceOp::kSum || op == ReduceOp::kMax;
    if (dtype == DataType::kBool) {
      acc = orLike ? (acc != 0 || v != 0) : (acc != 0 && v != 0);
      continue;
    }
    switch (op) {
      case ReduceOp::kSum:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::fmin(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::fmax(acc, v);
        break;
      default:
        throw std::logic_error("unexpected reduce op");
    }
  }
  return acc;
}

double dataValue(DataType dtype, size_t seed) {
  if (dtype == DataType::kBool) return static_cast<double>(seed % 2);
  const double v = static_cast<double>(seed % 13);
  return isUnsigned(dtype) ? v : v - 6;
}

void failElement(const std::string& context, size_t i, double got, double expected) {
  // Every digit a double has, so values a rounding step apart read apart.
  auto text = [](double v) {
    char s[32];
    std::snprintf(s, sizeof s, "%.17g", v);
    return std::string(s);
  };
  throw std::runtime_error(context + ": element " + std::to_string(i) + ": got " + text(got) +
                           ", expected " + text(expected));
}

}  // namespace kolo::test
