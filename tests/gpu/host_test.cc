// GPU-path logic that runs without a GPU: copy planning, transforms and
// neutral values, buffer growth, NCCL type/op mapping and argument checks,
// backend selection, and the staging backend's pass-through of host memory.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/conformance.h"
#include "comm/cuda/copy_plan.h"
#include "comm/cuda/device_set.h"
#include "comm/cuda/gpu_ops.h"
#include "comm/cuda/memory.h"
#include "comm/cuda/staged_collectives.h"
#include "comm/select.h"
#include "execution/reduce.h"
#include "comm/test_values.h"
#include "execution/executor.h"
#include "kolo/build_config.h"
#include "kolo/error.h"
#if KOLO_WITH_NCCL
#include "comm/nccl/collectives.h"
#include "comm/nccl/layout.h"
#include "comm/nccl/types.h"
#endif

namespace kolo::test {
namespace {

using comm::cuda::CopyDesc;
using comm::cuda::CopyTransform;

TEST(GpuCopyPlan, ChunksNeverStraddleTensorsAndDropEmptyOnes) {
  char a[1], b[1], c[1];
  const std::vector<CopyDesc> copies = {
      {a, b, 1000}, {a, b, 0}, {nullptr, c, 16384}, {a, c, 16385}};
  const auto plan = comm::cuda::planCopies(copies, 4, 64 * 1024);  // 16384 floats per chunk
  EXPECT_EQ(plan.chunkElements, 16384u);
  ASSERT_EQ(plan.descs.size(), 3u);
  EXPECT_EQ(plan.descs[0].firstChunk, 0u);
  EXPECT_EQ(plan.descs[1].firstChunk, 1u);
  EXPECT_EQ(plan.descs[1].src, nullptr);
  EXPECT_EQ(plan.descs[2].firstChunk, 2u);
  EXPECT_EQ(plan.descs[2].count, 16385u);
  EXPECT_EQ(plan.chunks, 4u);
}

TEST(GpuCopyPlan, EmptyPlanLaunchesNothing) {
  EXPECT_EQ(comm::cuda::planCopies({}, 2).chunks, 0u);
  char a[1];
  EXPECT_EQ(comm::cuda::planCopies({{a, a, 0}}, 8).chunks, 0u);
}

TEST(GpuCopyPlan, RejectsBadArguments) {
  char a[1];
  EXPECT_THROW(comm::cuda::planCopies({{a, a, 1}}, 4, 24), InvalidArgument);  // not 16-aligned
  EXPECT_THROW(comm::cuda::planCopies({{a, a, 1}}, 3), InvalidArgument);
  EXPECT_THROW(comm::cuda::planCopies({{a, nullptr, 1}}, 4), InvalidArgument);
}

TEST(GpuCopyPlan, PackOffsetsAreDense) {
  std::vector<uint64_t> offsets;
  EXPECT_EQ(comm::cuda::packOffsets({3, 0, 5, 1}, offsets), 9u);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 3, 3, 8}));
}

TEST(GpuCopyTransform, FollowsTheDtype) {
  using Kind = CopyTransform::Kind;
  EXPECT_EQ(comm::cuda::makeTransform(DataType::kFloat16, 0.5).kind, Kind::kScale);
  EXPECT_EQ(comm::cuda::makeTransform(DataType::kFloat32, 1.0).kind, Kind::kCopy);
  EXPECT_EQ(comm::cuda::makeTransform(DataType::kInt64, 1.0, 4).kind, Kind::kDivide);
  EXPECT_EQ(comm::cuda::makeTransform(DataType::kInt8, 1.0, 1).kind, Kind::kCopy);
  EXPECT_EQ(comm::cuda::makeTransform(DataType::kInt32, 0.5).kind, Kind::kScale);
  EXPECT_EQ(comm::cuda::makeTransform(DataType::kInt16, 1.0, 3).kind, Kind::kDivide);
  EXPECT_THROW(comm::cuda::makeTransform(DataType::kBool, 0.5), InvalidArgument);
  EXPECT_THROW(comm::cuda::makeTransform(DataType::kInt32, 0.5, 2), InvalidArgument);
  EXPECT_THROW(comm::cuda::makeTransform(DataType::kFloat64, 1.0, 2), InvalidArgument);
  EXPECT_THROW(comm::cuda::makeTransform(DataType::kBool, 1.0, 2), InvalidArgument);
  EXPECT_THROW(comm::cuda::makeTransform(DataType::kInt32, 1.0, 0), InvalidArgument);
}

// The kernel's neutral fill must write the bytes the CPU executor writes.
TEST(GpuCopyTransform, NeutralBitsMatchTheCpuExecutor) {
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                        ReduceOp::kProduct}) {
      uint64_t cpu = 0;
      fillNeutral(&cpu, 1, dtype, op);
      const uint64_t bits = comm::cuda::neutralBits(dtype, op);
      uint64_t gpu = 0;
      std::memcpy(&gpu, &bits, elementSize(dtype));
      EXPECT_EQ(gpu, cpu) << toString(dtype) << " " << toString(op);
    }
  }
}

TEST(GpuBuffers, GrowInLargeSteps) {
  EXPECT_EQ(comm::cuda::grownCapacity(0, 1), size_t(1) << 20);
  EXPECT_EQ(comm::cuda::grownCapacity(4 << 20, 100), size_t(4) << 20);
  EXPECT_EQ(comm::cuda::grownCapacity(4 << 20, (4 << 20) + 1), size_t(6) << 20);
  EXPECT_EQ(comm::cuda::grownCapacity(4 << 20, 100 << 20), size_t(100) << 20);
}

#if KOLO_WITH_NCCL
TEST(NcclTypes, EveryDtypeMaps) {
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kFloat32), ncclFloat32);
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kFloat64), ncclFloat64);
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kFloat16), ncclFloat16);
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kInt32), ncclInt32);
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kInt64), ncclInt64);
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kInt8), ncclInt8);
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kUInt8), ncclUint8);
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kBool), ncclUint8);
  // No 16-bit integer in NCCL: a 2-byte carrier for data movement only.
  EXPECT_EQ(comm::nccl::toNcclType(DataType::kInt16), ncclFloat16);
  EXPECT_THROW(comm::nccl::toNcclType(static_cast<DataType>(42)), InvalidArgument);
}

TEST(NcclTypes, ReduceOpsIncludingBoolAndAverage) {
  using comm::nccl::toNcclOp;
  EXPECT_EQ(toNcclOp(ReduceOp::kSum, DataType::kFloat32), ncclSum);
  EXPECT_EQ(toNcclOp(ReduceOp::kProduct, DataType::kInt32), ncclProd);
  EXPECT_EQ(toNcclOp(ReduceOp::kMin, DataType::kUInt8), ncclMin);
  EXPECT_EQ(toNcclOp(ReduceOp::kMax, DataType::kBFloat16), ncclMax);
  EXPECT_EQ(toNcclOp(ReduceOp::kSum, DataType::kBool), ncclMax);      // logical or
  EXPECT_EQ(toNcclOp(ReduceOp::kProduct, DataType::kBool), ncclMin);  // logical and
  EXPECT_EQ(toNcclOp(ReduceOp::kAverage, DataType::kFloat16), ncclAvg);
  EXPECT_THROW(toNcclOp(ReduceOp::kAverage, DataType::kInt64), InvalidArgument);
  EXPECT_THROW(toNcclOp(ReduceOp::kSum, DataType::kInt16), InvalidArgument);
  EXPECT_THROW(toNcclOp(ReduceOp::kAdasum, DataType::kFloat32), InvalidArgument);
  EXPECT_THROW(toNcclOp(static_cast<ReduceOp>(9), DataType::kFloat32), InvalidArgument);
}

TEST(NcclLayout, ChecksAndOffsets) {
  using namespace comm::nccl;
  EXPECT_THROW(checkCounts({1, 2, 3}, 2, "allgatherv"), InvalidArgument);
  EXPECT_NO_THROW(checkCounts({1, 2}, 2, "allgatherv"));
  EXPECT_THROW(checkRoot(2, 2, "broadcast"), InvalidArgument);
  EXPECT_THROW(checkRoot(-1, 2, "broadcast"), InvalidArgument);
  EXPECT_THROW(checkAlltoall({1, 2}, {1, 3}, 1, 2), InvalidArgument);
  EXPECT_NO_THROW(checkAlltoall({1, 2}, {5, 2}, 1, 2));
  EXPECT_EQ(blockOffsets({2, 0, 3}), (std::vector<size_t>{0, 2, 2}));
  EXPECT_EQ(total({2, 0, 3}), 5u);
  EXPECT_TRUE(allEqual({4, 4, 4}));
  EXPECT_TRUE(allEqual({}));
  EXPECT_FALSE(allEqual({4, 3, 4}));
}

TEST(NcclCollectives, HostMemoryIsInvalidArgument) {
  const Config config = commConfig();
  Identity id;
  auto args = comm::BackendArgs{config, id, makeHashStore(), ""};
  comm::nccl::Collectives nccl(args, std::make_shared<comm::cuda::DeviceSet>());
  std::vector<float> host(4, 1.0f);
  try {
    nccl.allreduce(host.data(), host.size(), DataType::kFloat32, ReduceOp::kSum);
    FAIL() << "NCCL accepted host memory";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nccl.broadcast(host.data(), 4, DataType::kFloat32, 1), InvalidArgument);
  EXPECT_THROW(nccl.allgatherv(host.data(), host.data(), {1, 1}, DataType::kFloat32),
               InvalidArgument);
}

#endif  // KOLO_WITH_NCCL

TEST(GpuSelect, UnknownBackendNamesTheVariable) {
  const Config config = commConfig();
  Identity id;
  auto args = comm::BackendArgs{config, id, makeHashStore(), ""};
  try {
    comm::createGpuCollectives("bogus", args, std::make_shared<comm::cuda::DeviceSet>());
    FAIL() << "accepted an unknown backend";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("KOLO_GPU_OPERATIONS=bogus"), std::string::npos)
        << e.what();
  }
#if KOLO_WITH_NCCL
  auto nccl = comm::createGpuCollectives("nccl", args, std::make_shared<comm::cuda::DeviceSet>());
  EXPECT_STREQ(nccl->name(), "nccl");
#endif
}

TEST(GpuSelect, GpuOpsForTheExecutor) {
  runWithArgs(1, [](int, const comm::BackendArgs& args) {
    auto ops = comm::createGpuOps("gloo", args);
    ASSERT_NE(ops, nullptr);
    EXPECT_STREQ(ops->name(), "gloo+staging");
  });
  const Config config = commConfig();
  Identity id;
  auto args = comm::BackendArgs{config, id, makeHashStore(), ""};
  EXPECT_THROW(comm::createGpuOps("bogus", args), InvalidArgument);
}

// Host buffers through the staging backend go straight to the CPU backend:
// the same object serves CPU and GPU tensors.
TEST(GpuStaging, HostMemoryPassesThroughToGloo) {
  runWithArgs(2, [](int rank, const comm::BackendArgs& args) {
    auto staged =
        comm::createGpuCollectives("gloo", args, std::make_shared<comm::cuda::DeviceSet>());
    EXPECT_STREQ(staged->name(), "gloo+staging");
    std::vector<int32_t> buf = {rank + 1, 10 * (rank + 1)};
    staged->allreduce(buf.data(), buf.size(), DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(buf, (std::vector<int32_t>{3, 30}));
    std::vector<int32_t> mine = {rank};
    std::vector<int32_t> all(2, -1);
    staged->allgatherv(mine.data(), all.data(), {1, 1}, DataType::kInt32);
    EXPECT_EQ(all, (std::vector<int32_t>{0, 1}));
  });
}

// A CUDA-aware MPI gets device buffers directly (comm/gpu_route.h): the
// wrapper is then named after the backend alone and still passes host
// memory straight through (float16 included, which it would stage for
// device memory). Over gloo here: the pass-through logic does not depend
// on the backend.
TEST(GpuStaging, DeviceDirectKeepsTheBackendNameAndPassesHostMemory) {
  runWithArgs(2, [](int rank, const comm::BackendArgs& args) {
    comm::cuda::StagedCollectives direct(comm::createCollectives("gloo", args),
                                         std::make_shared<comm::cuda::DeviceSet>(), rank, 2,
                                         /*deviceDirect=*/true);
    EXPECT_STREQ(direct.name(), "gloo");
    std::vector<uint16_t> half = {floatToHalf(1.0f + rank), floatToHalf(2.0f)};
    direct.allreduce(half.data(), half.size(), DataType::kFloat16, ReduceOp::kSum);
    EXPECT_EQ(halfToFloat(half[0]), 3.0f);
    EXPECT_EQ(halfToFloat(half[1]), 4.0f);
    std::vector<int32_t> in = {rank, rank, rank, rank}, out(2, -1);
    direct.reducescatter(in.data(), out.data(), {2, 2}, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(out, (std::vector<int32_t>{1, 1}));
  });
}

}  // namespace
}  // namespace kolo::test
