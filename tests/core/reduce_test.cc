#include <gtest/gtest.h>

#include <cmath>

#include "execution/executor.h"
#include "execution/reduce.h"

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
    int8_t iv[2] = {-128, 127}, in8[2], o8[2];
    fillNeutral(in8, 2, DataType::kInt8, op);
    reduceElements(o8, iv, in8, 2, DataType::kInt8, op);
    EXPECT_EQ(o8[0], -128);
    EXPECT_EQ(o8[1], 127);
  }
}

}  // namespace
}  // namespace kolo
