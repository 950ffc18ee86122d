// The batched copy kernel: mixed sizes (0, 1, odd, multi-chunk), unaligned
// fusion offsets, every dtype, scale / divide / fill, against the CPU
// arithmetic of core/src/reduce.cc. Needs a GPU.
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "device/cuda/check.h"
#include "comm/cuda/device_set.h"
#include "comm/test_values.h"
#include "comm/layout.h"
#include "kernels/reduce.h"
#include "gpu_test_util.h"

namespace kolo::test {
namespace {

using device::CopyDesc;
using device::CopyTransform;

const std::vector<uint64_t> kMixedCounts = {1, 0, 7, 16384, 16385, 3, 100000, 2, 65536 + 5, 0, 31};

// Packs kMixedCounts tensors densely into one buffer (so most offsets are
// unaligned) with transform, unpacks them with another, and compares both
// steps with the CPU.
void packUnpackRoundTrip(DataType dtype, const CopyTransform& pack, const CopyTransform& unpack,
                         bool withFill) {
  const size_t es = elementSize(dtype);
  comm::cuda::DeviceSet devices;
  comm::cuda::DeviceContext& ctx = devices.at(0);
  uint64_t total = 0;
  for (uint64_t c : kMixedCounts) total += c;

  std::mt19937 rng(7);
  std::vector<TypedBuffer> inputs;
  std::vector<std::unique_ptr<DeviceBytes>> devIn, devOut;
  std::vector<CopyDesc> packDescs, unpackDescs;
  DeviceBytes fused(total * es);
  std::vector<char> expectFused(total * es);
  uint64_t offset = 0;
  for (size_t t = 0; t < kMixedCounts.size(); ++t) {
    const uint64_t n = kMixedCounts[t];
    inputs.emplace_back(dtype, n);
    for (size_t i = 0; i < n; ++i) inputs.back().set(i, dataValue(dtype, rng() % 1000));
    devIn.push_back(std::make_unique<DeviceBytes>(inputs.back().data(), n * es));
    devOut.push_back(std::make_unique<DeviceBytes>(n * es));
    char* slot = static_cast<char*>(fused.get()) + offset * es;
    const bool fill = withFill && t % 3 == 2;
    packDescs.push_back(CopyDesc{fill ? nullptr : devIn.back()->get(), slot, n});
    unpackDescs.push_back(CopyDesc{slot, devOut.back()->get(), n});
    char* expect = expectFused.data() + offset * es;
    if (fill) {
      for (size_t i = 0; i < n; ++i) std::memcpy(expect + i * es, &pack.fillBits, es);
    } else if (n > 0) {
      std::memcpy(expect, inputs.back().data(), n * es);
      if (pack.kind == CopyTransform::Kind::kScale) scaleElements(expect, n, dtype, pack.scale);
      if (pack.kind == CopyTransform::Kind::kDivide) divideElements(expect, n, dtype, pack.divisor);
    }
    offset += n;
  }
  ctx.batchedCopy(packDescs, dtype, pack);
  ctx.synchronize();
  EXPECT_EQ(fused.download(), expectFused) << "pack " << toString(dtype);

  ctx.batchedCopy(unpackDescs, dtype, unpack);
  ctx.synchronize();
  offset = 0;
  for (size_t t = 0; t < kMixedCounts.size(); ++t) {
    const uint64_t n = kMixedCounts[t];
    std::vector<char> expect(expectFused.begin() + offset * es,
                             expectFused.begin() + (offset + n) * es);
    if (n > 0 && unpack.kind == CopyTransform::Kind::kScale) {
      scaleElements(expect.data(), n, dtype, unpack.scale);
    }
    if (n > 0 && unpack.kind == CopyTransform::Kind::kDivide) {
      divideElements(expect.data(), n, dtype, unpack.divisor);
    }
    EXPECT_EQ(devOut[t]->download(), expect) << "unpack " << toString(dtype) << " tensor " << t;
    offset += n;
  }
}

TEST(GpuBatchedCopy, PlainCopyEveryDtype) {
  KOLO_REQUIRE_GPU();
  for (DataType dtype : kAllDataTypes) {
    packUnpackRoundTrip(dtype, CopyTransform{}, CopyTransform{}, false);
  }
}

TEST(GpuBatchedCopy, ScaleEveryNumericType) {
  KOLO_REQUIRE_GPU();
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                         DataType::kBFloat16, DataType::kInt32, DataType::kInt64,
                         DataType::kInt16, DataType::kInt8, DataType::kUInt8}) {
    for (double scale : {0.5, 0.125, 3.0, 1.0 / 3.0}) {
      packUnpackRoundTrip(dtype, device::makeTransform(dtype, scale),
                          device::makeTransform(dtype, 1.0 / scale), false);
    }
  }
}

TEST(GpuBatchedCopy, DivideIntegerTypes) {
  KOLO_REQUIRE_GPU();
  for (DataType dtype : {DataType::kInt32, DataType::kInt64, DataType::kInt16, DataType::kInt8,
                         DataType::kUInt8}) {
    packUnpackRoundTrip(dtype, CopyTransform{}, device::makeTransform(dtype, 1.0, 3), false);
  }
}

TEST(GpuBatchedCopy, NullSourceFillsNeutralUnscaled) {
  KOLO_REQUIRE_GPU();
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      CopyTransform pack =
          device::makeTransform(dtype, isFloatingPoint(dtype) ? 0.5 : 1.0);
      pack.fillBits = device::neutralBits(dtype, op);
      packUnpackRoundTrip(dtype, pack, CopyTransform{}, true);
    }
  }
}

TEST(GpuBatchedCopy, InPlaceScale) {
  KOLO_REQUIRE_GPU();
  comm::cuda::DeviceSet devices;
  std::vector<float> host(100003);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 97);
  DeviceBytes d(host.data(), host.size() * sizeof(float));
  // Start one element in, so the vector body needs a peeled head.
  devices.at(0).batchedCopy({CopyDesc{static_cast<float*>(d.get()) + 1,
                                      static_cast<float*>(d.get()) + 1, host.size() - 1}},
                            DataType::kFloat32, device::makeTransform(DataType::kFloat32, 2.0));
  devices.at(0).synchronize();
  std::vector<float> got(host.size());
  d.download(got.data());
  EXPECT_EQ(got[0], host[0]);
  for (size_t i = 1; i < host.size(); ++i) ASSERT_EQ(got[i], host[i] * 2.0f) << i;
}

// More tensors than one launch holds (copy_plan.h's kMaxDescsPerLaunch):
// 2500 tensors of mixed odd sizes (some empty, some over one chunk) are
// read from one buffer at dense, mostly unaligned offsets, packed at the
// 16-byte aligned offsets of kolo::fusionLayout (as GpuExecutor's fused
// allreduce lays them out) with transform `pack` (every third one filled
// when withFill), and unpacked densely with `unpack`; each step is
// compared byte for byte with the CPU's arithmetic.
void manyTensorsRoundTrip(DataType dtype, const CopyTransform& pack, const CopyTransform& unpack,
                          bool withFill) {
  const size_t es = elementSize(dtype);
  std::vector<uint64_t> counts;
  for (uint64_t t = 0; t < 2500; ++t) {
    counts.push_back(t % 11 == 4 ? 0 : (t * 37) % 301 + (t % 250 == 7 ? 40000 : 0));
  }
  uint64_t dense = 0;
  std::vector<uint64_t> denseAt;
  for (uint64_t c : counts) {
    denseAt.push_back(dense);
    dense += c;
  }
  const FusionLayout layout = fusionLayout(counts, es, kGpuFusionAlignBytes);
  ASSERT_GT(counts.size() - std::count(counts.begin(), counts.end(), 0u),
            size_t(2) * device::kMaxDescsPerLaunch);

  std::mt19937 rng(11);
  TypedBuffer input(dtype, dense);
  for (size_t i = 0; i < dense; ++i) input.set(i, dataValue(dtype, rng() % 1000));
  DeviceBytes devIn(input.data(), dense * es);
  DeviceBytes fused(layout.total * es);
  DeviceBytes devOut(dense * es);
  std::vector<char> expectFused(layout.total * es, 0);
  std::vector<char> expectOut(dense * es, 0);
  // The gaps of the fused buffer are never written: start them at 0 on both sides.
  std::vector<char> zeros(layout.total * es, 0);
  KOLO_CUDA_CHECK(cudaMemcpy(fused.get(), zeros.data(), zeros.size(), cudaMemcpyHostToDevice));

  std::vector<CopyDesc> packDescs, unpackDescs;
  for (size_t t = 0; t < counts.size(); ++t) {
    const uint64_t n = counts[t];
    char* in = static_cast<char*>(devIn.get()) + denseAt[t] * es;
    char* slot = static_cast<char*>(fused.get()) + layout.offsets[t] * es;
    char* out = static_cast<char*>(devOut.get()) + denseAt[t] * es;
    const bool fill = withFill && t % 3 == 2;
    packDescs.push_back(CopyDesc{fill ? nullptr : in, slot, n});
    unpackDescs.push_back(CopyDesc{slot, out, n});
    char* f = expectFused.data() + layout.offsets[t] * es;
    if (n == 0) continue;
    if (fill) {
      for (size_t i = 0; i < n; ++i) std::memcpy(f + i * es, &pack.fillBits, es);
    } else {
      std::memcpy(f, static_cast<const char*>(input.data()) + denseAt[t] * es, n * es);
      if (pack.kind == CopyTransform::Kind::kScale) scaleElements(f, n, dtype, pack.scale);
      if (pack.kind == CopyTransform::Kind::kDivide) divideElements(f, n, dtype, pack.divisor);
    }
    char* o = expectOut.data() + denseAt[t] * es;
    std::memcpy(o, f, n * es);
    if (unpack.kind == CopyTransform::Kind::kScale) scaleElements(o, n, dtype, unpack.scale);
    if (unpack.kind == CopyTransform::Kind::kDivide) divideElements(o, n, dtype, unpack.divisor);
  }
  comm::cuda::DeviceSet devices;
  comm::cuda::DeviceContext& ctx = devices.at(0);
  ctx.batchedCopy(packDescs, dtype, pack);
  ctx.synchronize();
  EXPECT_TRUE(fused.download() == expectFused) << "pack " << toString(dtype);
  ctx.batchedCopy(unpackDescs, dtype, unpack);
  ctx.synchronize();
  EXPECT_TRUE(devOut.download() == expectOut) << "unpack " << toString(dtype);
}

TEST(GpuBatchedCopy, MoreTensorsThanOneLaunchHoldsEveryTransform) {
  KOLO_REQUIRE_GPU();
  for (DataType dtype : kAllDataTypes) {
    SCOPED_TRACE(toString(dtype));
    manyTensorsRoundTrip(dtype, CopyTransform{}, CopyTransform{}, false);
    CopyTransform fill;
    fill.fillBits = device::neutralBits(dtype, ReduceOp::kMax);
    manyTensorsRoundTrip(dtype, fill, CopyTransform{}, true);
    if (dtype == DataType::kBool) continue;
    manyTensorsRoundTrip(dtype, device::makeTransform(dtype, 0.5),
                         device::makeTransform(dtype, 3.0), false);
    if (!isFloatingPoint(dtype)) {
      manyTensorsRoundTrip(dtype, CopyTransform{}, device::makeTransform(dtype, 1.0, 3), false);
    }
  }
}

TEST(GpuBuffers, FusionBufferIsReusedAndGrowsRarely) {
  KOLO_REQUIRE_GPU();
  comm::cuda::DeviceSet devices;
  auto& ctx = devices.at(0);
  void* a = ctx.fusion(1000);
  EXPECT_EQ(ctx.fusion(500), a);
  EXPECT_EQ(ctx.fusion(1 << 20), a);  // within the first 1 MiB grain
  EXPECT_EQ(device::cuda::deviceOf(a), 0);
  EXPECT_EQ(device::cuda::deviceOf(ctx.staging(10)), -1);  // pinned host memory
}

}  // namespace
}  // namespace kolo::test
