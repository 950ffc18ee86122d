#include "kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kolo/error.h"

namespace kolo {

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0);
  }
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf
  if (absx < 0x38800000u) {                        // subnormal or zero in half
    if (absx < 0x33000000u) return sign;
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);  // 14..24
    uint32_t result = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t mant = absx & 0x7fffffu;
  uint32_t result = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

namespace {

template <typename T>
void reduceTyped(T* out, const T* a, const T* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(a[i] + b[i]);
      return;
    case ReduceOp::kProduct:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(a[i] * b[i]);
      return;
    case ReduceOp::kMin:
      for (size_t i = 0; i < n; ++i) out[i] = std::min(a[i], b[i]);
      return;
    case ReduceOp::kMax:
      for (size_t i = 0; i < n; ++i) out[i] = std::max(a[i], b[i]);
      return;
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      break;
  }
  throw Internal(std::string("reduceElements: ") + toString(op) +
                 " is not an element-wise reduction (average is lowered to sum + postscale)");
}

// fp16/bf16: compute in float, round once per element.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduceHalf(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n,
                ReduceOp op) {
  for (size_t i = 0; i < n; ++i) {
    float x = ToFloat(a[i]);
    float y = ToFloat(b[i]);
    float r;
    switch (op) {
      case ReduceOp::kSum: r = x + y; break;
      case ReduceOp::kProduct: r = x * y; break;
      case ReduceOp::kMin: r = std::min(x, y); break;
      case ReduceOp::kMax: r = std::max(x, y); break;
      default: throw Internal("reduceElements: average must be lowered to sum + postscale");
    }
    out[i] = FromFloat(r);
  }
}

void reduceBool(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n,
                ReduceOp op) {
  bool isAnd = op == ReduceOp::kProduct || op == ReduceOp::kMin;
  if (op == ReduceOp::kAverage || op == ReduceOp::kAdasum) {
    throw Internal(std::string("bool ") + toString(op) + " is not supported");
  }
  for (size_t i = 0; i < n; ++i) {
    bool x = a[i] != 0;
    bool y = b[i] != 0;
    out[i] = isAnd ? (x && y) : (x || y);
  }
}

// Floating types scale in their own precision with the factor rounded to it
// (float32: float math), as Horovod does on the CPU.
template <typename T>
void scaleFloating(T* buf, size_t n, double factor) {
  const T f = static_cast<T>(factor);
  for (size_t i = 0; i < n; ++i) buf[i] = buf[i] * f;
}

// fp16/bf16: float32 math, rounded once to the 16-bit type.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scaleHalf(uint16_t* buf, size_t n, double factor) {
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) buf[i] = FromFloat(ToFloat(buf[i]) * f);
}

// Integers: float64 math, truncated toward zero and cast back (wrapping like
// a C cast through int64 when out of range; NaN becomes 0).
template <typename T>
void scaleInteger(T* buf, size_t n, double factor) {
  constexpr double kLimit = 9223372036854775807.0;  // 2^63
  for (size_t i = 0; i < n; ++i) {
    const double v = std::trunc(static_cast<double>(buf[i]) * factor);
    int64_t w = 0;
    if (v >= kLimit) {
      w = std::numeric_limits<int64_t>::max();
    } else if (v <= -kLimit) {
      w = std::numeric_limits<int64_t>::min();
    } else if (v == v) {
      w = static_cast<int64_t>(v);
    }
    buf[i] = static_cast<T>(w);
  }
}

template <typename T>
void divideTyped(T* buf, size_t n, int64_t divisor) {
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<T>(buf[i] / divisor);
}

// reduceScaledElements for float and double: blocks of kBlock elements,
// all loaded and combined before any is stored, so out and out2 may alias
// a or b exactly and the compiler still vectorizes each block.
template <typename T, typename Op>
void reduceScaledTyped(T* out, T* out2, const T* a, const T* b, size_t n, T f, Op op) {
  constexpr size_t kBlock = 16;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    T r[kBlock];
    for (size_t j = 0; j < kBlock; ++j) r[j] = static_cast<T>(op(a[i + j], b[i + j])) * f;
    for (size_t j = 0; j < kBlock; ++j) out[i + j] = r[j];
    if (out2 != nullptr) {
      for (size_t j = 0; j < kBlock; ++j) out2[i + j] = r[j];
    }
  }
  for (; i < n; ++i) {
    const T r = static_cast<T>(op(a[i], b[i])) * f;
    out[i] = r;
    if (out2 != nullptr) out2[i] = r;
  }
}

template <typename T>
bool reduceScaledFloating(void* out, void* out2, const void* a, const void* b, size_t n,
                          ReduceOp op, double factor) {
  T* o = static_cast<T*>(out);
  T* o2 = static_cast<T*>(out2);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  const T f = static_cast<T>(factor);
  switch (op) {
    case ReduceOp::kSum:
      reduceScaledTyped(o, o2, x, y, n, f, [](T p, T q) { return p + q; });
      return true;
    case ReduceOp::kProduct:
      reduceScaledTyped(o, o2, x, y, n, f, [](T p, T q) { return p * q; });
      return true;
    case ReduceOp::kMin:
      reduceScaledTyped(o, o2, x, y, n, f, [](T p, T q) { return std::min(p, q); });
      return true;
    case ReduceOp::kMax:
      reduceScaledTyped(o, o2, x, y, n, f, [](T p, T q) { return std::max(p, q); });
      return true;
    default:
      return false;
  }
}

}  // namespace

void reduceElements(void* out, const void* a, const void* b, size_t n,
                    DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32:
      return reduceTyped(static_cast<float*>(out), static_cast<const float*>(a),
                         static_cast<const float*>(b), n, op);
    case DataType::kFloat64:
      return reduceTyped(static_cast<double*>(out), static_cast<const double*>(a),
                         static_cast<const double*>(b), n, op);
    case DataType::kFloat16:
      return reduceHalf<halfToFloat, floatToHalf>(
          static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
          static_cast<const uint16_t*>(b), n, op);
    case DataType::kBFloat16:
      return reduceHalf<bfloat16ToFloat, floatToBfloat16>(
          static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
          static_cast<const uint16_t*>(b), n, op);
    case DataType::kInt32:
      return reduceTyped(static_cast<int32_t*>(out), static_cast<const int32_t*>(a),
                         static_cast<const int32_t*>(b), n, op);
    case DataType::kInt64:
      return reduceTyped(static_cast<int64_t*>(out), static_cast<const int64_t*>(a),
                         static_cast<const int64_t*>(b), n, op);
    case DataType::kInt8:
      return reduceTyped(static_cast<int8_t*>(out), static_cast<const int8_t*>(a),
                         static_cast<const int8_t*>(b), n, op);
    case DataType::kUInt8:
      return reduceTyped(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a),
                         static_cast<const uint8_t*>(b), n, op);
    case DataType::kBool:
      return reduceBool(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a),
                        static_cast<const uint8_t*>(b), n, op);
    case DataType::kInt16:
      return reduceTyped(static_cast<int16_t*>(out), static_cast<const int16_t*>(a),
                         static_cast<const int16_t*>(b), n, op);
  }
  throw Internal("reduceElements: unknown dtype");
}

void reduceScaledElements(void* out, void* out2, const void* a, const void* b, size_t n,
                          DataType dtype, ReduceOp op, double factor) {
  if (dtype == DataType::kFloat32 &&
      reduceScaledFloating<float>(out, out2, a, b, n, op, factor)) {
    return;
  }
  if (dtype == DataType::kFloat64 &&
      reduceScaledFloating<double>(out, out2, a, b, n, op, factor)) {
    return;
  }
  // Every other dtype: the three passes.
  reduceElements(out, a, b, n, dtype, op);
  scaleElements(out, n, dtype, factor);
  if (out2 != nullptr && out2 != out) std::memcpy(out2, out, n * elementSize(dtype));
}

void scaleElements(void* buf, size_t n, DataType dtype, double factor) {
  if (factor == 1.0) return;
  switch (dtype) {
    case DataType::kFloat32: return scaleFloating(static_cast<float*>(buf), n, factor);
    case DataType::kFloat64: return scaleFloating(static_cast<double*>(buf), n, factor);
    case DataType::kFloat16:
      return scaleHalf<halfToFloat, floatToHalf>(static_cast<uint16_t*>(buf), n, factor);
    case DataType::kBFloat16:
      return scaleHalf<bfloat16ToFloat, floatToBfloat16>(static_cast<uint16_t*>(buf), n, factor);
    case DataType::kInt32: return scaleInteger(static_cast<int32_t*>(buf), n, factor);
    case DataType::kInt64: return scaleInteger(static_cast<int64_t*>(buf), n, factor);
    case DataType::kInt16: return scaleInteger(static_cast<int16_t*>(buf), n, factor);
    case DataType::kInt8: return scaleInteger(static_cast<int8_t*>(buf), n, factor);
    case DataType::kUInt8: return scaleInteger(static_cast<uint8_t*>(buf), n, factor);
    case DataType::kBool: break;
  }
  throw Internal(std::string("scaleElements: cannot scale ") + toString(dtype));
}

void divideElements(void* buf, size_t n, DataType dtype, int64_t divisor) {
  switch (dtype) {
    case DataType::kInt32: return divideTyped(static_cast<int32_t*>(buf), n, divisor);
    case DataType::kInt64: return divideTyped(static_cast<int64_t*>(buf), n, divisor);
    case DataType::kInt16: return divideTyped(static_cast<int16_t*>(buf), n, divisor);
    case DataType::kInt8: return divideTyped(static_cast<int8_t*>(buf), n, divisor);
    case DataType::kUInt8: return divideTyped(static_cast<uint8_t*>(buf), n, divisor);
    default: return scaleElements(buf, n, dtype, 1.0 / static_cast<double>(divisor));
  }
}

}  // namespace kolo
