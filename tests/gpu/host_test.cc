// GPU-path logic that runs without a GPU: copy planning, transforms and
// neutral values, buffer growth, NCCL type/op mapping and argument checks,
// backend selection, and the staging backend's pass-through of host memory.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "comm/conformance.h"
#include "device/copy_plan.h"
#include "comm/cuda/device_set.h"
#include "comm/cuda/gpu_ops.h"
#include "device/cuda/memory.h"
#include "comm/cuda/staged_collectives.h"
#include "comm/select.h"
#include "kernels/reduce.h"
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

using device::CopyDesc;
using device::CopyTransform;

TEST(GpuCopyPlan, ChunksNeverStraddleTensorsAndDropEmptyOnes) {
  char a[1], b[1], c[1];
  const std::vector<CopyDesc> copies = {
      {a, b, 1000}, {a, b, 0}, {nullptr, c, 16384}, {a, c, 16385}};
  const auto plan = device::planCopies(copies, 4, 64 * 1024);  // 16384 floats per chunk
  EXPECT_EQ(plan.chunkElements, 16384u);
  ASSERT_EQ(plan.descs.size(), 3u);
  EXPECT_EQ(plan.descs[0].firstChunk, 0u);
  EXPECT_EQ(plan.descs[1].firstChunk, 1u);
  EXPECT_EQ(plan.descs[1].src, nullptr);
  EXPECT_EQ(plan.descs[2].firstChunk, 2u);
  EXPECT_EQ(plan.descs[2].count, 16385u);
  EXPECT_EQ(plan.chunks, 4u);
  ASSERT_EQ(plan.launches.size(), 1u);
  EXPECT_EQ(plan.launches[0].firstDesc, 0u);
  EXPECT_EQ(plan.launches[0].numDescs, 3u);
  EXPECT_EQ(plan.launches[0].chunks, 4u);
}

TEST(GpuCopyPlan, EmptyPlanLaunchesNothing) {
  EXPECT_EQ(device::planCopies({}, 2).chunks, 0u);
  EXPECT_TRUE(device::planCopies({}, 2).launches.empty());
  char a[1];
  const auto plan = device::planCopies({{a, a, 0}, {a, nullptr, 0}}, 8);
  EXPECT_EQ(plan.chunks, 0u);
  EXPECT_TRUE(plan.launches.empty());
  EXPECT_TRUE(plan.descs.empty());
}

TEST(GpuCopyPlan, RejectsBadArguments) {
  char a[1];
  EXPECT_THROW(device::planCopies({{a, a, 1}}, 4, 24), InvalidArgument);  // not 16-aligned
  EXPECT_THROW(device::planCopies({{a, a, 1}}, 4, 0), InvalidArgument);
  EXPECT_THROW(device::planCopies({{a, a, 1}}, 3), InvalidArgument);
  EXPECT_THROW(device::planCopies({{a, nullptr, 1}}, 4), InvalidArgument);
  EXPECT_THROW(device::planCopies({{a, a, 1}}, 4, 64, 0), InvalidArgument);
  EXPECT_THROW(device::planCopies({{a, a, 1}}, 4, 64, device::kMaxDescsPerLaunch + 1),
               InvalidArgument);
}

// Replays a plan as the kernel's blocks (and the host runtime) do: every
// launch's chunks in order, each found by descOfChunk from the previous
// chunk's descriptor and, independently, from 0. Returns, per tensor, how
// many times each element was covered.
std::vector<std::vector<int>> coverage(const std::vector<CopyDesc>& copies,
                                       const device::CopyPlan& plan) {
  std::vector<std::vector<int>> covered(copies.size());
  for (size_t t = 0; t < copies.size(); ++t) covered[t].assign(copies[t].count, 0);
  size_t nextDesc = 0;
  for (const device::CopyLaunch& l : plan.launches) {
    EXPECT_EQ(l.firstDesc, nextDesc);
    EXPECT_GE(l.numDescs, 1u);
    EXPECT_LE(l.numDescs, device::kMaxDescsPerLaunch);
    nextDesc += l.numDescs;
    const device::DeviceCopyDesc* descs = plan.descs.data() + l.firstDesc;
    EXPECT_EQ(descs[0].firstChunk, 0u) << "each launch numbers its chunks from 0";
    uint64_t expectFirst = 0;
    for (uint32_t i = 0; i < l.numDescs; ++i) {
      EXPECT_EQ(descs[i].firstChunk, expectFirst);
      expectFirst += (descs[i].count + plan.chunkElements - 1) / plan.chunkElements;
    }
    EXPECT_EQ(expectFirst, l.chunks);
    uint32_t i = 0;
    for (uint64_t chunk = 0; chunk < l.chunks; ++chunk) {
      i = device::descOfChunk(descs, i, l.numDescs, chunk);
      EXPECT_EQ(device::descOfChunk(descs, 0, l.numDescs, chunk), i) << chunk;
      const device::DeviceCopyDesc& d = descs[i];
      const uint64_t begin = (chunk - d.firstChunk) * plan.chunkElements;
      const uint64_t n = std::min(plan.chunkElements, d.count - begin);
      // Which tensor: the desc's dst is the tensor's index (see the callers).
      const size_t t = reinterpret_cast<uintptr_t>(d.dst) - 1;
      for (uint64_t k = begin; k < begin + n; ++k) covered.at(t).at(k) += 1;
    }
  }
  EXPECT_EQ(nextDesc, plan.descs.size());
  return covered;
}

// A list longer than one launch splits into launches that, together, cover
// every element of every tensor exactly once; empty tensors take no slot.
TEST(GpuCopyPlan, LongListsSplitIntoLaunchesCoveringEveryElementOnce) {
  std::vector<CopyDesc> copies;
  size_t nonEmpty = 0;
  for (size_t t = 0; t < 2500; ++t) {
    // dst encodes the tensor (never dereferenced): index + 1, non-null.
    void* dst = reinterpret_cast<void*>(static_cast<uintptr_t>(t + 1));
    const uint64_t count = t % 7 == 3 ? 0 : (t * 37) % 301 + (t % 100 == 0 ? 5000 : 0);
    copies.push_back(CopyDesc{t % 5 == 0 ? nullptr : dst, dst, count});
    if (count > 0) ++nonEmpty;
  }
  const auto plan = device::planCopies(copies, 2, 256);  // 128 elements per chunk
  EXPECT_EQ(plan.descs.size(), nonEmpty);
  const size_t launches =
      (nonEmpty + device::kMaxDescsPerLaunch - 1) / device::kMaxDescsPerLaunch;
  ASSERT_EQ(plan.launches.size(), launches);
  ASSERT_GE(launches, 3u);
  for (size_t l = 0; l + 1 < launches; ++l) {
    EXPECT_EQ(plan.launches[l].numDescs, device::kMaxDescsPerLaunch) << l;
  }
  uint64_t chunks = 0;
  for (const auto& l : plan.launches) chunks += l.chunks;
  EXPECT_EQ(chunks, plan.chunks);
  const auto covered = coverage(copies, plan);
  for (size_t t = 0; t < copies.size(); ++t) {
    for (size_t k = 0; k < covered[t].size(); ++k) {
      ASSERT_EQ(covered[t][k], 1) << "tensor " << t << " element " << k;
    }
  }
  // Order and sources are kept.
  size_t d = 0;
  for (size_t t = 0; t < copies.size(); ++t) {
    if (copies[t].count == 0) continue;
    EXPECT_EQ(plan.descs[d].src, copies[t].src);
    EXPECT_EQ(plan.descs[d].dst, copies[t].dst);
    ++d;
  }
}

TEST(GpuCopyPlan, LaunchLimitIsExact) {
  for (uint32_t limit :
       {1u, 2u, device::kSmallDescsPerLaunch, device::kMaxDescsPerLaunch}) {
    for (size_t n : {size_t(limit) - 1, size_t(limit), size_t(limit) + 1, 2 * size_t(limit) + 1}) {
      if (n == 0) continue;
      std::vector<CopyDesc> copies;
      for (size_t t = 0; t < n; ++t) {
        void* dst = reinterpret_cast<void*>(static_cast<uintptr_t>(t + 1));
        copies.push_back(CopyDesc{dst, dst, t % 3 + 1});
      }
      const auto plan = device::planCopies(copies, 4, 16, limit);  // 4 elements per chunk
      EXPECT_EQ(plan.launches.size(), (n + limit - 1) / limit) << limit << " " << n;
      EXPECT_EQ(plan.launches.back().numDescs, n - (plan.launches.size() - 1) * limit);
      const auto covered = coverage(copies, plan);
      for (size_t t = 0; t < n; ++t) {
        EXPECT_EQ(covered[t], std::vector<int>(copies[t].count, 1)) << t;
      }
    }
  }
}

TEST(GpuCopyPlan, DescriptorsFitTheKernelParameterSpace) {
  // The tiers the kernel is instantiated for (batched_copy.cu checks the
  // exact parameter sizes at compile time).
  EXPECT_EQ(device::descTier(1), device::kSmallDescsPerLaunch);
  EXPECT_EQ(device::descTier(device::kSmallDescsPerLaunch),
            device::kSmallDescsPerLaunch);
  EXPECT_EQ(device::descTier(device::kSmallDescsPerLaunch + 1),
            device::kMaxDescsPerLaunch);
  EXPECT_EQ(device::descTier(device::kMaxDescsPerLaunch), device::kMaxDescsPerLaunch);
  EXPECT_LE(device::kMaxDescsPerLaunch * sizeof(device::DeviceCopyDesc) +
                device::kKernelParamOverheadBytes,
            device::kMaxKernelParamBytes);
}

TEST(GpuCopyPlan, DescOfChunkFindsTheLastDescStartingAtOrBefore) {
  struct D {
    uint64_t firstChunk;
  };
  const std::vector<D> descs = {{0}, {1}, {5}, {6}, {100}};
  const uint32_t n = static_cast<uint32_t>(descs.size());
  const std::vector<std::pair<uint64_t, uint32_t>> cases = {{0, 0}, {1, 1},  {4, 1},   {5, 2},
                                                            {6, 3}, {99, 3}, {100, 4}, {1000, 4}};
  for (const auto& [chunk, want] : cases) {
    EXPECT_EQ(device::descOfChunk(descs, 0, n, chunk), want) << chunk;
    for (uint32_t from = 0; from <= want; ++from) {
      EXPECT_EQ(device::descOfChunk(descs, from, n, chunk), want) << chunk << " " << from;
    }
  }
  EXPECT_EQ(device::descOfChunk(descs, 0, 1, 1000), 0u);
}

TEST(GpuCopyPlan, GridIsOneBlockPerChunkUpToWhatTheDeviceHolds) {
  // H100: 132 SMs of 2048 threads, 8 blocks of 256 threads each.
  EXPECT_EQ(device::copyGridSize(0, 132, 2048), 0u);
  EXPECT_EQ(device::copyGridSize(1, 132, 2048), 1u);
  EXPECT_EQ(device::copyGridSize(1056, 132, 2048), 1056u);
  EXPECT_EQ(device::copyGridSize(1057, 132, 2048), 1056u);
  EXPECT_EQ(device::copyGridSize(uint64_t(1) << 40, 132, 2048), 1056u);
  // Nonsense attributes still give a valid grid.
  EXPECT_EQ(device::copyGridSize(10, 0, 0), 1u);
  EXPECT_EQ(device::copyGridSize(10, 4, 100), 4u);
}

TEST(GpuCopyTransform, FollowsTheDtype) {
  using Kind = CopyTransform::Kind;
  EXPECT_EQ(device::makeTransform(DataType::kFloat16, 0.5).kind, Kind::kScale);
  EXPECT_EQ(device::makeTransform(DataType::kFloat32, 1.0).kind, Kind::kCopy);
  EXPECT_EQ(device::makeTransform(DataType::kInt64, 1.0, 4).kind, Kind::kDivide);
  EXPECT_EQ(device::makeTransform(DataType::kInt8, 1.0, 1).kind, Kind::kCopy);
  EXPECT_EQ(device::makeTransform(DataType::kInt32, 0.5).kind, Kind::kScale);
  EXPECT_EQ(device::makeTransform(DataType::kInt16, 1.0, 3).kind, Kind::kDivide);
  EXPECT_THROW(device::makeTransform(DataType::kBool, 0.5), InvalidArgument);
  EXPECT_THROW(device::makeTransform(DataType::kInt32, 0.5, 2), InvalidArgument);
  EXPECT_THROW(device::makeTransform(DataType::kFloat64, 1.0, 2), InvalidArgument);
  EXPECT_THROW(device::makeTransform(DataType::kBool, 1.0, 2), InvalidArgument);
  EXPECT_THROW(device::makeTransform(DataType::kInt32, 1.0, 0), InvalidArgument);
}

// The kernel's neutral fill must write the bytes the CPU executor writes.
TEST(GpuCopyTransform, NeutralBitsMatchTheCpuExecutor) {
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                        ReduceOp::kProduct}) {
      uint64_t cpu = 0;
      fillNeutral(&cpu, 1, dtype, op);
      const uint64_t bits = device::neutralBits(dtype, op);
      uint64_t gpu = 0;
      std::memcpy(&gpu, &bits, elementSize(dtype));
      EXPECT_EQ(gpu, cpu) << toString(dtype) << " " << toString(op);
    }
  }
}

TEST(GpuBuffers, GrowInLargeSteps) {
  EXPECT_EQ(device::grownCapacity(0, 1), size_t(1) << 20);
  EXPECT_EQ(device::grownCapacity(4 << 20, 100), size_t(4) << 20);
  EXPECT_EQ(device::grownCapacity(4 << 20, (4 << 20) + 1), size_t(6) << 20);
  EXPECT_EQ(device::grownCapacity(4 << 20, 100 << 20), size_t(100) << 20);
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
