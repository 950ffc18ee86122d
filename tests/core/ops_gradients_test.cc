// The decisions every DistributedOptimizer shares (kolo/gradients.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kolo/error.h"
#include "kolo/gradients.h"

namespace kolo {
namespace {

std::vector<size_t> sizesOf(const std::vector<std::vector<size_t>>& groups) {
  std::vector<size_t> out;
  for (const auto& g : groups) out.push_back(g.size());
  return out;
}

TEST(GradientGroups, NumGroupsSplitsAsHorovodDoes) {
  EXPECT_EQ(sizesOf(splitIntoGroups(10, 4)), (std::vector<size_t>{3, 3, 2, 2}));
  EXPECT_EQ(sizesOf(splitIntoGroups(10, 3)), (std::vector<size_t>{4, 3, 3}));
  EXPECT_EQ(sizesOf(splitIntoGroups(8, 4)), (std::vector<size_t>{2, 2, 2, 2}));
  EXPECT_EQ(sizesOf(splitIntoGroups(3, 5)), (std::vector<size_t>{1, 1, 1})) << "no empty groups";
  EXPECT_TRUE(splitIntoGroups(0, 4).empty());
  EXPECT_TRUE(splitIntoGroups(5, 0).empty());
  const auto groups = splitIntoGroups(5, 2);
  EXPECT_EQ(groups, (std::vector<std::vector<size_t>>{{0, 1, 2}, {3, 4}}))
      << "contiguous, in order";
}

std::string errorOf(const GradientOptions& o) {
  try {
    checkGradientOptions(o);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(GradientOptionsCheck, EachBadFieldIsNamed) {
  EXPECT_EQ(errorOf(GradientOptions{}), "");
  GradientOptions o;
  o.backwardPassesPerStep = 0;
  EXPECT_NE(errorOf(o).find("DistributedOptimizer: backward_passes_per_step must be >= 1, got 0"),
            std::string::npos);
  o = {};
  o.op = ReduceOp::kMax;
  EXPECT_NE(errorOf(o).find("op must be Average, Sum or Adasum"), std::string::npos);
  o = {};
  o.gradientPredivideFactor = 0;
  EXPECT_NE(errorOf(o).find("gradient_predivide_factor must be > 0"), std::string::npos);
  o = {};
  o.gradientPredivideFactor = 2;
  o.op = ReduceOp::kSum;
  EXPECT_NE(errorOf(o).find("gradient_predivide_factor needs op == Average"), std::string::npos);
  o = {};
  o.numGroups = 2;
  o.explicitGroups = true;
  EXPECT_NE(errorOf(o).find("set num_groups or groups, not both"), std::string::npos);
  o = {};
  o.bucketBytes = -1;
  EXPECT_NE(errorOf(o).find("bucket_bytes must be >= 0"), std::string::npos);
}

TEST(GradientOptionsCheck, ScalesOfAPredividedAverage) {
  EXPECT_DOUBLE_EQ(gradientScales(ReduceOp::kAverage, 4).prescale, 0.25);
  EXPECT_DOUBLE_EQ(gradientScales(ReduceOp::kAverage, 4).postscale, 4);
  EXPECT_DOUBLE_EQ(gradientScales(ReduceOp::kSum, 1).prescale, 1);
  EXPECT_DOUBLE_EQ(gradientScales(ReduceOp::kAverage, 1).postscale, 1);
}

GradientInfo grad(std::string name, int64_t numel, DataType dtype = DataType::kFloat32) {
  GradientInfo g;
  g.name = std::move(name);
  g.numel = numel;
  g.dtype = dtype;
  return g;
}

TEST(BucketPlanner, ReverseOrderUpToTheCapAndGroupsWhole) {
  std::vector<GradientInfo> grads = {grad("a", 4), grad("b", 4), grad("c", 4), grad("d", 8),
                                     grad("e", 2, DataType::kFloat64)};
  BucketPlan plan;
  plan.bucketBytes = 32;  // 8 floats
  plan.groups = {{0, 1}};
  const auto buckets = planBuckets(grads, plan);
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(buckets[0].members, (std::vector<size_t>{0, 1})) << "the group first, whole";
  EXPECT_EQ(buckets[0].name, "grad.a+1");
  EXPECT_EQ(buckets[0].offsets, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(buckets[1].members, (std::vector<size_t>{4})) << "float64 starts its own bucket";
  EXPECT_EQ(buckets[1].wire, DataType::kFloat64);
  EXPECT_EQ(buckets[2].members, (std::vector<size_t>{3})) << "d fills a bucket";
  EXPECT_EQ(buckets[3].members, (std::vector<size_t>{2}));
  EXPECT_EQ(buckets[3].name, "grad.c");
}

TEST(BucketPlanner, CompressionDecidesTheWireAndZeroBytesMeansOneEach) {
  std::vector<GradientInfo> grads = {grad("w", 4), grad("i", 4, DataType::kInt64)};
  BucketPlan plan;
  plan.bucketBytes = 0;
  plan.compression = Compression::kFP16;
  plan.namePrefix = "p.";
  const auto buckets = planBuckets(grads, plan);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].name, "p.i");
  EXPECT_EQ(buckets[0].wire, DataType::kInt64) << "integers travel as they are";
  EXPECT_EQ(buckets[1].wire, DataType::kFloat16);
}

TEST(BucketPlanner, BadNamesAndGroupsAreNamed) {
  auto errorFor = [](std::vector<GradientInfo> g, BucketPlan p) -> std::string {
    try {
      planBuckets(g, p, "Opt");
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(
      errorFor({grad("a", 1), grad("a", 1)}, {}).find("Opt: parameter name 'a' appears twice"),
      std::string::npos);
  EXPECT_NE(errorFor({grad("", 1)}, {}).find("empty name"), std::string::npos);
  BucketPlan twice;
  twice.groups = {{0}, {0}};
  EXPECT_NE(errorFor({grad("a", 1)}, twice).find("'a' is in more than one group"),
            std::string::npos);
  BucketPlan outside;
  outside.groups = {{3}};
  EXPECT_NE(errorFor({grad("a", 1)}, outside).find("group 0 names parameter 3 of 1"),
            std::string::npos);
}

TEST(GradientStepCounts, ABucketIsReadyWhenEveryMemberHadItsPasses) {
  BucketPlan plan;
  plan.groups = {{0, 1}, {2}};
  const auto buckets = planBuckets({grad("a", 1), grad("b", 1), grad("c", 1)}, plan);
  GradientSteps steps(buckets, 3, /*passesPerStep=*/2);
  using A = GradientSteps::Arrival;
  EXPECT_EQ(steps.accumulated(0), A::kCounted);
  EXPECT_EQ(steps.accumulated(0), A::kCounted);
  EXPECT_EQ(steps.accumulated(1), A::kCounted);
  EXPECT_EQ(steps.accumulated(1), A::kBucketReady);
  EXPECT_EQ(steps.accumulated(1), A::kTooManyPasses);
  EXPECT_NE(steps.describe(A::kTooManyPasses, "b").find("more than backward_passes_per_step (2)"),
            std::string::npos);
  steps.markSubmitted(1);
  steps.accumulated(2);
  EXPECT_EQ(steps.accumulated(2), A::kLate) << "its bucket went without it";
  EXPECT_TRUE(steps.anyCounted());
  steps.reset();
  EXPECT_FALSE(steps.anyCounted());
  EXPECT_FALSE(steps.submitted(1));
  steps.setPassesPerStep(1);
  EXPECT_EQ(steps.accumulated(2), A::kBucketReady);
  EXPECT_EQ(steps.accumulated(0, /*countOnly=*/true), A::kCounted) << "Adasum only counts";
}

}  // namespace
}  // namespace kolo
