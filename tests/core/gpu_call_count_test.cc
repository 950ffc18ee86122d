// How many device runtime calls a training step's GPU allreduces cost, over
// the host device runtime (each of its calls is at least one CUDA runtime
// call in CudaRuntime): on the training side (the thread that records the
// buckets' ready events, enqueues them and orders its stream after them)
// and on kolo's own threads, per bucket. On a GPU, tools/cudacount counts
// every CUDA call of a real step (scripts/gpu-check); this keeps the
// orchestration's share bounded in every CI build, sanitizers included.
//
// Issue 34's goals: <= 10 calls per bucket on kolo's threads, <= 20 per
// step on the training side. Every wait is bounded.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "device/host/host_runtime.h"
#include "gpu_orchestration_util.h"
#include "harness/harness.h"
#include "kolo/engine.h"

namespace kolo {
namespace {

using namespace gpu_test;

struct StepCalls {
  double trainingPerStep = 0;
  double kolosPerBucket = 0;
};

// `steps` steps of `buckets` buckets on every one of `size` ranks: each
// bucket's ready event recorded on the training stream, the bucket
// enqueued, and at the end the stream made to wait for the last done event
// and synchronized (as reading the loss does). Counted after two warm-up
// steps (the first one negotiates and allocates).
StepCalls countSteps(int size, int buckets, int steps, bool fuse) {
  auto rt = std::make_shared<HostRuntime>(size);
  Config config = gpuConfig(rt);
  if (!fuse) config.fusionThresholdBytes = 0;  // each bucket its own response
  HostRuntime::Calls before{}, after{};
  uint64_t trainingCalls = 0;
  test::ThreadBarrier phase(size);
  test::spawn(size, [&](int rank, Engine& engine) {
    const int device = rank;
    std::vector<std::unique_ptr<DeviceFloats>> grads;
    for (int b = 0; b < buckets; ++b) {
      grads.push_back(std::make_unique<DeviceFloats>(*rt, device, 4096));
    }
    std::vector<device::Event> ready;
    UserStream user(*rt, device);
    for (int b = 0; b < buckets; ++b) ready.push_back(rt->createEvent(device, false));
    uint64_t mine = 0;
    for (int step = 0; step < steps + 2; ++step) {
      if (step == 2) {
        phase.arrive();
        if (rank == 0) before = rt->calls();
        phase.arrive();
      }
      const uint64_t start = rt->callsOnThisThread();
      std::vector<Handle> handles;
      for (int b = 0; b < buckets; ++b) {
        rt->record(ready[b], user.stream);
        Entry e;
        e.input = e.output = grads[b]->data;
        e.readyEvent = ready[b];
        handles.push_back(engine.enqueue(
            cudaRequest("bucket." + std::to_string(b), OpType::kAllreduce, 4096, device),
            std::move(e)));
      }
      std::vector<const Handle*> all;
      for (const Handle& h : handles) all.push_back(&h);
      for (const Handle::DoneEvent& d : Handle::lastDoneEvents(all)) {
        rt->wait(user.stream, static_cast<device::Event>(d.event));
      }
      rt->synchronize(user.stream);
      if (step >= 2) mine += rt->callsOnThisThread() - start;
      for (const Handle& h : handles) ASSERT_TRUE(h.waitFor(kLimit)) << "step " << step;
    }
    phase.arrive();
    if (rank == 0) {
      after = rt->calls();
      trainingCalls = mine;  // rank 0's thread; the others' make as many
    }
    phase.arrive();
    for (device::Event e : ready) rt->destroyEvent(e);
  }, config);
  StepCalls out;
  out.trainingPerStep = static_cast<double>(trainingCalls) / steps;
  out.kolosPerBucket =
      static_cast<double>(after.pinned - before.pinned) / (double(steps) * buckets * size);
  return out;
}

TEST(GpuCallCount, KolosThreadsMakeAtMostTenCallsPerBucket) {
  for (const bool fuse : {false, true}) {
    const StepCalls c = countSteps(1, 4, 20, fuse);
    std::printf("size 1, 4 buckets, %s: kolo's threads %.1f calls per bucket, training side "
                "%.1f per step\n",
                fuse ? "fused" : "one response each", c.kolosPerBucket, c.trainingPerStep);
    EXPECT_LE(c.kolosPerBucket, 10.0) << (fuse ? "fused" : "one response per bucket");
    // record per bucket, one stream wait, one synchronize: buckets + 2.
    EXPECT_LE(c.trainingPerStep, 20.0) << (fuse ? "fused" : "one response per bucket");
  }
}

TEST(GpuCallCount, TwoRanksCostNoMorePerBucket) {
  const StepCalls c = countSteps(2, 4, 20, false);
  std::printf("size 2, 4 buckets: kolo's threads %.1f calls per bucket and rank, training "
              "side %.1f per step\n",
              c.kolosPerBucket, c.trainingPerStep);
  EXPECT_LE(c.kolosPerBucket, 10.0);
  EXPECT_LE(c.trainingPerStep, 20.0);
  EXPECT_GT(c.trainingPerStep, 0.0) << "the training side's calls went uncounted";
}

// How the completion thread learns that a response's GPU work is done
// (GpuOps::flushSignals): a host function on the comm stream holds the
// stream, and the next response's work with it, until the driver's
// callback thread ran it (the host runtime runs it on a callback thread of
// its own too). While a caller's small ops follow one another, its waiter
// reports each fence and none is placed.
uint64_t hostFunctions(const HostRuntime& rt) {
  const HostRuntime::Calls c = rt.calls();
  const auto m = static_cast<size_t>(HostRuntime::Method::kHostFunc);
  return c.pinnedBy[m] + c.unpinnedBy[m];
}

TEST(GpuSignals, SmallOpsOneAfterAnotherPlaceNoHostFunctionWhileTheirWaitersReportThem) {
  auto rt = std::make_shared<HostRuntime>(1);
  Config config = gpuConfig(rt);
  // Far above an op's time on a loaded machine: the loop thread and the
  // waiter spin between the ops.
  config.spinTime = std::chrono::milliseconds(200);
  uint64_t placed = 0;
  constexpr int kOps = 50;
  test::spawn(1, [&](int rank, Engine& engine) {
    DeviceFloats t(*rt, rank, 1);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(settle(allreduce(engine, "x", t, rank)).ok());
    const uint64_t before = hostFunctions(*rt);
    for (int i = 0; i < kOps; ++i) ASSERT_TRUE(settle(allreduce(engine, "x", t, rank)).ok());
    placed = hostFunctions(*rt) - before;
  }, config);
  std::printf("%d ops one after another: %llu host functions\n", kOps,
              static_cast<unsigned long long>(placed));
  // One per op before: the waiters' reports make them unnecessary. A few
  // for ops that took longer than the spin time on a loaded machine.
  EXPECT_LE(placed, 5u);
}

TEST(GpuSignals, AnOpNobodyWaitsForCompletesOnceTheLoopThreadStopsSpinning) {
  auto rt = std::make_shared<HostRuntime>(1);
  Config config = gpuConfig(rt);
  config.spinTime = std::chrono::milliseconds(20);
  test::spawn(1, [&](int rank, Engine& engine) {
    DeviceFloats t(*rt, rank, 1);
    std::promise<Status> called;
    auto done = called.get_future();
    const uint64_t before = hostFunctions(*rt);
    // Never waited on: only a host function reports its fence.
    Handle h = allreduce(engine, "x", t, rank, nullptr,
                         [&called](const Status& s) { called.set_value(s); });
    ASSERT_EQ(done.wait_for(kLimit), std::future_status::ready)
        << "an op nobody waited for never completed";
    EXPECT_TRUE(done.get().ok());
    EXPECT_GE(hostFunctions(*rt) - before, 1u);
    EXPECT_TRUE(h.poll());
  }, config);
}

}  // namespace
}  // namespace kolo
