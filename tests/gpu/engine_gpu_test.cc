// CUDA tensors through the whole engine (negotiation, fusion, the GPU path
// of execution/gpu_path.h): every op x dtype against the same request on
// host memory through the CPU data plane, fusion of 100+ tensors, the ready
// event ordering an input produced on another stream, and a joined rank.
// Planes: NCCL at size 1 (NCCL refuses two ranks on one GPU), gloo staging
// at sizes 2 and 3 (ranks as threads sharing the one GPU). Needs a GPU.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "device/cuda/check.h"
#include "core/ops_util.h"
#include "gpu_test_util.h"
#include "harness/harness.h"
#include "kolo/build_config.h"

namespace kolo::test {
namespace {

struct Plane {
  const char* ops;
  int size;
};

Config planeConfig(const Plane& p) {
  Config c = testConfig();
  c.gpuOperations = p.ops;
  c.timeout = std::chrono::seconds(30);  // first NCCL communicator setup
  return c;
}

std::string label(const Plane& p) { return std::string(p.ops) + " size " + std::to_string(p.size); }

// Device outputs allocated on the background thread, as an adapter does.
struct DeviceOutputs {
  std::mutex mu;
  std::vector<std::unique_ptr<DeviceBytes>> buffers;
  bool sawStream = true;  // every CUDA allocation saw outputAllocationStream()
  OutputAllocator allocator(DataType dtype, std::vector<int64_t>* shape, DeviceBytes** out) {
    return [this, dtype, shape, out](const std::vector<int64_t>& s) {
      std::lock_guard<std::mutex> lock(mu);
      if (outputAllocationStream() == nullptr) sawStream = false;
      *shape = s;
      buffers.push_back(std::make_unique<DeviceBytes>(numElements(s) * elementSize(dtype)));
      *out = buffers.back().get();
      return buffers.back()->get();
    };
  }
};

struct HostOutputs {
  std::vector<std::vector<char>> buffers;
  OutputAllocator allocator(DataType dtype, std::vector<int64_t>* shape, char** out) {
    buffers.reserve(64);
    return [this, dtype, shape, out](const std::vector<int64_t>& s) {
      *shape = s;
      buffers.emplace_back(numElements(s) * elementSize(dtype) + 1);
      *out = buffers.back().data();
      return static_cast<void*>(buffers.back().data());
    };
  }
};

double tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return 1e-2;
    case DataType::kBFloat16: return 2e-2;
    case DataType::kFloat32: return 1e-5;
    case DataType::kFloat64: return 1e-12;
    default: return 0;
  }
}

struct Case {
  OpType op;
  ReduceOp reduce = ReduceOp::kSum;
  double pre = 1.0, post = 1.0;
};

std::vector<Case> casesFor(DataType dtype) {
  std::vector<Case> out;
  const bool fl = isFloatingPoint(dtype);
  for (ReduceOp r : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                     ReduceOp::kProduct}) {
    if (dtype == DataType::kBool && r == ReduceOp::kAverage) continue;
    out.push_back({OpType::kAllreduce, r});
  }
  if (fl) {
    out.push_back({OpType::kAllreduce, ReduceOp::kSum, 0.5, 2.0});
    out.push_back({OpType::kAllreduce, ReduceOp::kAverage, 2.0, 0.25});
  }
  out.push_back({OpType::kBroadcast});
  out.push_back({OpType::kAllgather});
  out.push_back({OpType::kAlltoall});
  out.push_back({OpType::kReducescatter, ReduceOp::kSum});
  if (dtype != DataType::kBool) out.push_back({OpType::kReducescatter, ReduceOp::kAverage});
  if (fl) out.push_back({OpType::kReducescatter, ReduceOp::kSum, 0.5, 4.0});
  return out;
}

// Runs one case on a CUDA copy and on host memory; compares the results.
void runCase(Engine& engine, int rank, int size, DataType dtype, const Case& c, int index,
             const std::string& what, DeviceOutputs& dev) {
  const size_t es = elementSize(dtype);
  std::vector<int64_t> shape = {static_cast<int64_t>(size) * 2 + 1, 3};
  if (c.op == OpType::kAlltoall) shape[0] = size * 2;
  if (c.op == OpType::kAllgather) shape[0] = rank + 1;
  const size_t n = static_cast<size_t>(numElements(shape));
  std::vector<char> host = makeBuffer(dtype, n, rank, c.reduce);
  std::vector<char> hostOut(n * es + 1);
  DeviceBytes devIn(host.data(), n * es), devOut(n * es);

  Request q = makeRequest("c" + std::to_string(index), c.op, dtype, shape, c.reduce);
  q.prescale = c.pre;
  q.postscale = c.post;
  q.root = size - 1;
  Request g = q;
  g.name += ".gpu";
  g.device = DeviceKind::kCuda;
  g.deviceIndex = 0;

  HostOutputs hostAlloc;
  std::vector<int64_t> hostShape, devShape;
  char* hostPtr = hostOut.data();
  DeviceBytes* devPtr = &devOut;
  Entry he{host.data(), hostOut.data(), {}, {}};
  Entry ge{devIn.get(), devOut.get(), {}, {}};
  const bool negotiated = c.op == OpType::kAllgather || c.op == OpType::kAlltoall ||
                          c.op == OpType::kReducescatter;
  if (negotiated) {
    he.output = nullptr;
    ge.output = nullptr;
    he.allocate = hostAlloc.allocator(dtype, &hostShape, &hostPtr);
    ge.allocate = dev.allocator(dtype, &devShape, &devPtr);
  }
  Handle hh = engine.enqueue(q, he);
  Handle gh = engine.enqueue(g, ge);
  hh.wait();
  gh.wait();
  if (negotiated) {
    ASSERT_EQ(hostShape, devShape) << what;
    ASSERT_EQ(gh.outputShape(), hh.outputShape()) << what;
  }
  const size_t outCount = negotiated ? static_cast<size_t>(numElements(hostShape)) : n;
  std::vector<char> got = devPtr->download();
  const double tol = tolerance(dtype);
  for (size_t i = 0; i < outCount; ++i) {
    const double want = load(dtype, hostPtr, i);
    const double have = load(dtype, got.data(), i);
    if (std::isnan(want) && std::isnan(have)) continue;
    ASSERT_LE(std::fabs(want - have), tol * std::max(1.0, std::fabs(want)))
        << what << " element " << i << ": cpu " << want << ", cuda " << have;
  }
}

class EngineGpu : public ::testing::TestWithParam<Plane> {};

TEST_P(EngineGpu, EveryOpAndDtypeMatchesTheCpuDataPlane) {
  KOLO_REQUIRE_GPU();
  const Plane p = GetParam();
  spawn(p.size, [&](int rank, Engine& engine) {
    DeviceOutputs dev;
    int index = 0;
    for (int d = 0; d < kNumDataTypes; ++d) {
      const auto dtype = static_cast<DataType>(d);
      for (const Case& c : casesFor(dtype)) {
        const std::string what = label(p) + " " + toString(c.op) + " " + toString(c.reduce) +
                                 " " + toString(dtype) + " pre " + std::to_string(c.pre) +
                                 " post " + std::to_string(c.post);
        const bool reduces = c.op == OpType::kAllreduce || c.op == OpType::kReducescatter;
        if (reduces && dtype == DataType::kInt16 && std::string(p.ops) == "nccl") {
          Request q = makeRequest("int16", c.op, dtype, {4}, c.reduce);
          q.device = DeviceKind::kCuda;
          q.deviceIndex = 0;
          DeviceBytes b(8);
          EXPECT_THROW(engine.enqueue(q, Entry{b.get(), b.get(), {}, {}}), InvalidArgument);
          continue;
        }
        runCase(engine, rank, p.size, dtype, c, index++, what, dev);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    EXPECT_TRUE(dev.sawStream) << "an output allocator ran without outputAllocationStream()";
  }, planeConfig(p), std::chrono::seconds(240));
}

TEST_P(EngineGpu, FusesAHundredAndFiftyTensorsOfMixedSizes) {
  KOLO_REQUIRE_GPU();
  const Plane p = GetParam();
  const int count = 150;
  spawn(p.size, [&](int rank, Engine& engine) {
    std::vector<std::unique_ptr<DeviceBytes>> bufs;
    std::vector<size_t> sizes;
    std::vector<Request> requests;
    std::vector<Entry> entries;
    for (int t = 0; t < count; ++t) {
      const size_t n = 1 + (static_cast<size_t>(t) * 7919) % 20000;  // 1 .. 20000
      sizes.push_back(n);
      std::vector<float> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((rank + t + i) % 13);
      bufs.push_back(std::make_unique<DeviceBytes>(host.data(), n * 4));
      Request q = makeRequest("f" + std::to_string(t), OpType::kAllreduce, DataType::kFloat32,
                              {static_cast<int64_t>(n)});
      q.device = DeviceKind::kCuda;
      q.deviceIndex = 0;
      requests.push_back(q);
      entries.push_back(Entry{bufs.back()->get(), bufs.back()->get(), {}, {}});
    }
    const EngineStats before = engine.stats();
    std::vector<Handle> hs = engine.enqueueGroup(std::move(requests), std::move(entries));
    for (auto& h : hs) h.wait();
    const EngineStats after = engine.stats();
    EXPECT_EQ(after.fusedTensors - before.fusedTensors, static_cast<uint64_t>(count));
    EXPECT_LT(after.responses - before.responses, 5u) << "the group was not fused";
    for (int t = 0; t < count; ++t) {
      std::vector<float> got(sizes[t]);
      bufs[t]->download(got.data());
      for (size_t i = 0; i < sizes[t]; ++i) {
        float want = 0;
        for (int r = 0; r < p.size; ++r) want += static_cast<float>((r + t + i) % 13);
        ASSERT_EQ(got[i], want) << "tensor " << t << " element " << i;
      }
    }
  }, planeConfig(p), std::chrono::seconds(120));
}

// The input is written on a user stream that is held back on the host for
// 300 ms; the engine's comm stream must wait on the ready event, not read
// the stale bytes.
void delayHost(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }

TEST_P(EngineGpu, ReadyEventOrdersAnInputProducedOnAnotherStream) {
  KOLO_REQUIRE_GPU();
  const Plane p = GetParam();
  spawn(p.size, [&](int rank, Engine& engine) {
    const size_t n = 1 << 20;
    std::vector<float> fresh(n, 1.0f + rank), stale(n, -100.0f);
    DeviceBytes src(fresh.data(), n * 4), buf(stale.data(), n * 4);
    cudaStream_t user = nullptr;
    cudaEvent_t ready = nullptr;
    KOLO_CUDA_CHECK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
    KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    KOLO_CUDA_CHECK(cudaLaunchHostFunc(user, delayHost, nullptr));
    KOLO_CUDA_CHECK(cudaMemcpyAsync(buf.get(), src.get(), n * 4, cudaMemcpyDeviceToDevice, user));
    KOLO_CUDA_CHECK(cudaEventRecord(ready, user));
    Request q = makeRequest("ready", OpType::kAllreduce, DataType::kFloat32,
                            {static_cast<int64_t>(n)});
    q.device = DeviceKind::kCuda;
    q.deviceIndex = 0;
    Entry e{buf.get(), buf.get(), {}, {}};
    e.readyEvent = ready;
    engine.enqueue(q, e).wait();
    std::vector<float> got(n);
    buf.download(got.data());
    float want = 0;
    for (int r = 0; r < p.size; ++r) want += 1.0f + r;
    EXPECT_EQ(got[0], want);
    EXPECT_EQ(got[n - 1], want);
    cudaEventDestroy(ready);
    cudaStreamDestroy(user);
  }, planeConfig(p));
}

// A joined rank takes part in a CUDA allreduce with neutral values, on the
// device it used before.
TEST_P(EngineGpu, AJoinedRankContributesNeutralValues) {
  KOLO_REQUIRE_GPU();
  const Plane p = GetParam();
  if (p.size < 2) GTEST_SKIP() << "join needs two ranks";
  spawn(p.size, [&](int rank, Engine& engine) {
    std::vector<float> host(1000, 2.0f);
    DeviceBytes buf(host.data(), host.size() * 4);
    Request q = makeRequest("warm", OpType::kAllreduce, DataType::kFloat32, {1000});
    q.device = DeviceKind::kCuda;
    q.deviceIndex = 0;
    engine.enqueue(q, Entry{buf.get(), buf.get(), {}, {}}).wait();
    if (rank == 0) {
      DeviceBytes b2(host.data(), host.size() * 4);
      q.name = "after_join";
      q.reduceOp = ReduceOp::kMin;
      engine.enqueue(q, Entry{b2.get(), b2.get(), {}, {}}).wait();
      std::vector<float> got(1000);
      b2.download(got.data());
      EXPECT_EQ(got[0], 2.0f);  // min with +inf from the joined ranks
    }
    engine.join().wait();
  }, planeConfig(p));
}

INSTANTIATE_TEST_SUITE_P(Planes, EngineGpu,
                         ::testing::Values(Plane{"nccl", 1}, Plane{"gloo", 2}, Plane{"gloo", 3}),
                         [](const ::testing::TestParamInfo<Plane>& info) {
                           return std::string(info.param.ops) + "_np" +
                                  std::to_string(info.param.size);
                         });

}  // namespace
}  // namespace kolo::test
