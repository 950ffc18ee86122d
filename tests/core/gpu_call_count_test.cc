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
      const uint64_t start = rt->calls().unpinned;
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
      // With one rank every unpinned call is this thread's.
      if (step >= 2 && size == 1) mine += rt->calls().unpinned - start;
      for (const Handle& h : handles) ASSERT_TRUE(h.waitFor(kLimit)) << "step " << step;
    }
    phase.arrive();
    if (rank == 0) {
      after = rt->calls();
      trainingCalls = mine;
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
  std::printf("size 2, 4 buckets: kolo's threads %.1f calls per bucket and rank\n",
              c.kolosPerBucket);
  EXPECT_LE(c.kolosPerBucket, 10.0);
}

}  // namespace
}  // namespace kolo
