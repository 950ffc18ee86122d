#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "execution/executor.h"
#include "kernels/reduce.h"

namespace kolo {
namespace {

TEST(Half, ConversionsRoundTripAndRound) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 1000.5f}) {
    EXPECT_EQ(halfToFloat(floatToHalf(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(halfToFloat(floatToHalf(1e6f))));
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(std::nanf("")))));
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 1.0f / 4096)), 1.0f);  // ties to even
  for (float f : {0.0f, 1.0f, -3.0f, 256.0f, 3072.0f}) {
    EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(f)), f) << f;
  }
}

TEST(Reduce, BoolOpsAreLogical) {
  uint8_t a[4] = {0, 1, 0, 1}, b[4] = {0, 0, 1, 1}, out[4];
  reduceElements(out, a, b, 4, DataType::kBool, ReduceOp::kSum);
  EXPECT_EQ((std::vector<int>{out[0], out[1], out[2], out[3]}), (std::vector<int>{0, 1, 1, 1}));
  reduceElements(out, a, b, 4, DataType::kBool, ReduceOp::kProduct);
  EXPECT_EQ((std::vector<int>{out[0], out[1], out[2], out[3]}), (std::vector<int>{0, 0, 0, 1}));
}

TEST(Reduce, NeutralElementsLeaveTheOtherSideUnchanged) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  float vals[3] = {-3.0f, 0.0f, 7.5f};
  for (ReduceOp op : ops) {
    float neutral[3], out[3];
    fillNeutral(neutral, 3, DataType::kFloat32, op);
    reduceElements(out, vals, neutral, 3, DataType::kFloat32, op);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], vals[i]) << toString(op);
    int16_t sv[2] = {-32768, 32767}, n16[2], o16[2];
    fillNeutral(n16, 2, DataType::kInt16, op);
    reduceElements(o16, sv, n16, 2, DataType::kInt16, op);
    EXPECT_EQ(o16[0], -32768) << toString(op);
    EXPECT_EQ(o16[1], 32767) << toString(op);
    int8_t iv[2] = {-128, 127}, in8[2], o8[2];
    fillNeutral(in8, 2, DataType::kInt8, op);
    reduceElements(o8, iv, in8, 2, DataType::kInt8, op);
    EXPECT_EQ(o8[0], -128);
    EXPECT_EQ(o8[1], 127);
  }
}

// Horovod's CPU scaling: integers in float64 truncated toward zero, float16
// (and bfloat16) in float32, float32 in float32, float64 in float64.
TEST(Scale, FollowsHorovodArithmeticPerDtype) {
  int32_t i32[4] = {7, -7, 100, -1};
  scaleElements(i32, 4, DataType::kInt32, 0.5);
  EXPECT_EQ((std::vector<int32_t>(i32, i32 + 4)), (std::vector<int32_t>{3, -3, 50, 0}));
  int16_t i16[3] = {-301, 3000, 5};
  scaleElements(i16, 3, DataType::kInt16, 0.1);
  EXPECT_EQ((std::vector<int16_t>(i16, i16 + 3)), (std::vector<int16_t>{-30, 300, 0}));
  int64_t i64[2] = {int64_t(1) << 52, -9};
  scaleElements(i64, 2, DataType::kInt64, 3.0);
  EXPECT_EQ(i64[0], int64_t(3) << 52);
  EXPECT_EQ(i64[1], -27);
  uint8_t u8[2] = {200, 9};
  scaleElements(u8, 2, DataType::kUInt8, 1.5);  // 300 wraps like a C cast: 44
  EXPECT_EQ(u8[0], 44);
  EXPECT_EQ(u8[1], 13);
  bool sawDifference = false;
  for (int k = 1; k < 2000; ++k) {
    const double f = 0.123456789 * k / 7.0;
    const float x = static_cast<float>(k) * 0.37f - 50.0f;
    float a = x;
    scaleElements(&a, 1, DataType::kFloat32, f);
    EXPECT_EQ(a, x * static_cast<float>(f)) << k;  // float math, factor rounded to float
    sawDifference |= a != static_cast<float>(static_cast<double>(x) * f);
    uint16_t h = floatToHalf(x);
    scaleElements(&h, 1, DataType::kFloat16, f);
    EXPECT_EQ(h, floatToHalf(halfToFloat(floatToHalf(x)) * static_cast<float>(f))) << k;
    double d = x;
    scaleElements(&d, 1, DataType::kFloat64, f);
    EXPECT_EQ(d, static_cast<double>(x) * f);
  }
  EXPECT_TRUE(sawDifference) << "float32 scaling must not be done in double";
  uint8_t b[1] = {1};
  EXPECT_THROW(scaleElements(b, 1, DataType::kBool, 2.0), Internal);
}

// reduceScaledElements is reduceElements, scaleElements and a copy in one
// pass: bit for bit the same result in both outputs, for every dtype, also
// when an output is one of the inputs (the shm plane writes a rank's own
// part over its input) and at lengths around its 16-element blocks.
TEST(ReduceScaled, IsReduceThenScaleThenCopyEvenWhenAnOutputIsAnInput) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                         DataType::kBFloat16, DataType::kInt32, DataType::kInt8}) {
    const size_t es = elementSize(dtype);
    for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(1000)}) {
      std::vector<char> a(n * es), b(n * es);
      for (size_t i = 0; i < n * es; ++i) {
        // Bytes that make finite values in every dtype: small exponents.
        a[i] = static_cast<char>((i * 37 + 11) % 61);
        b[i] = static_cast<char>((i * 53 + 7) % 59);
      }
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        for (double factor : {1.0, 0.5, 0.1}) {
          if (!isFloatingPoint(dtype) && factor != 1.0) continue;
          const std::string what = std::string(toString(dtype)) + " " + toString(op) + " n=" +
                                   std::to_string(n) + " factor " + std::to_string(factor);
          std::vector<char> want(n * es);
          reduceElements(want.data(), a.data(), b.data(), n, dtype, op);
          scaleElements(want.data(), n, dtype, factor);
          // Separate outputs.
          std::vector<char> out(n * es), out2(n * es);
          reduceScaledElements(out.data(), out2.data(), a.data(), b.data(), n, dtype, op, factor);
          EXPECT_EQ(out, want) << what;
          EXPECT_EQ(out2, want) << what;
          // The second output is the first input, as in the shm plane.
          std::vector<char> own = a, slot(n * es);
          reduceScaledElements(slot.data(), own.data(), own.data(), b.data(), n, dtype, op,
                               factor);
          EXPECT_EQ(slot, want) << what;
          EXPECT_EQ(own, want) << what;
          // The only output is the second input, no second output.
          std::vector<char> acc = b;
          reduceScaledElements(acc.data(), nullptr, a.data(), acc.data(), n, dtype, op, factor);
          EXPECT_EQ(acc, want) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kolo
