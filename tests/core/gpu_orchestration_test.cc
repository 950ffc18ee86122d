// The GPU path's orchestration (gpu_path, GpuExecutor, the completion
// watcher, two-stage handles, fusion, process sets, the error paths) run by
// real engines over the host device runtime (device/host), which stands in
// for the GPU this machine lacks: ranks are threads, each stream an
// in-order worker thread, faults are injected at each stage of a
// response's device work. The defects of the first-GPU-run review have
// their tests in gpu_defects_test.cc (see docs/developers/device-runtime.md).
//
// Every wait is bounded by an event with a generous limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/backend_args.h"
#include "comm/cuda/gpu_executor.h"
#include "comm/select.h"
#include "device/host/host_runtime.h"
#include "comm/layout.h"
#include "gpu_orchestration_util.h"
#include "harness/harness.h"
#include "kolo/engine.h"
#include "rendezvous/key_value_map.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;
using namespace gpu_test;  // HostRuntime, Stage, DeviceFloats, UserStream...

// --- The orchestration, healthy ---------------------------------------------

void fusedAllreduceAndFriends(int size) {
  auto rt = std::make_shared<HostRuntime>(2);  // two devices, shared by the ranks
  test::spawn(size, [&](int rank, Engine& engine) {
    const int device = rank % 2;
    const std::vector<size_t> sizes = {1, 7, 1000, 33, 0};
    std::vector<std::unique_ptr<DeviceFloats>> tensors;
    std::vector<Request> requests;
    std::vector<Entry> entries;
    for (size_t t = 0; t < sizes.size(); ++t) {
      tensors.push_back(std::make_unique<DeviceFloats>(*rt, device, sizes[t]));
      for (size_t i = 0; i < sizes[t]; ++i) tensors[t]->data[i] = float(rank + 1) * float(i + t);
      requests.push_back(
          cudaRequest("grad." + std::to_string(t), OpType::kAllreduce, sizes[t], device));
      requests.back().reduceOp = ReduceOp::kAverage;
      Entry e;
      e.input = e.output = tensors[t]->data;
      entries.push_back(std::move(e));
    }
    std::vector<Handle> handles = engine.enqueueGroup(requests, std::move(entries));
    for (const Handle& h : handles) {
      (void)h.waitEnqueued();  // the first stage comes before (or with) the second
      ASSERT_TRUE(settle(h).ok()) << h.status().message;
    }
    const float mean = float(size + 1) / 2.0f;  // average of rank + 1
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (size_t i = 0; i < sizes[t]; ++i) {
        ASSERT_FLOAT_EQ(tensors[t]->data[i], mean * float(i + t)) << "tensor " << t << " [" << i << "]";
      }
    }
    EXPECT_GE(engine.stats().fusedTensors, 2u);  // the group went as a fused response

    // Broadcast and allgather (an output allocated on the comm stream).
    DeviceFloats b(*rt, device, 5);
    for (size_t i = 0; i < 5; ++i) b.data[i] = float(rank * 10 + i);
    Entry be;
    be.input = be.output = b.data;
    Request bq = cudaRequest("bcast", OpType::kBroadcast, 5, device);
    bq.root = size - 1;
    ASSERT_TRUE(settle(engine.enqueue(bq, std::move(be))).ok());
    for (size_t i = 0; i < 5; ++i) ASSERT_EQ(b.data[i], float((size - 1) * 10 + i));

    DeviceFloats g(*rt, device, 2);
    g.data[0] = float(rank);
    g.data[1] = float(rank) + 0.5f;
    std::unique_ptr<DeviceFloats> gathered;
    Entry ge;
    ge.input = g.data;
    ge.allocate = [&](const std::vector<int64_t>& shape) -> void* {
      gathered = std::make_unique<DeviceFloats>(*rt, device, size_t(shape[0]));
      return gathered->data;
    };
    ASSERT_TRUE(settle(engine.enqueue(cudaRequest("gather", OpType::kAllgather, 2, device),
                                      std::move(ge)))
                    .ok());
    ASSERT_EQ(gathered->n, size_t(2 * size));
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(gathered->data[2 * r], float(r));
      EXPECT_EQ(gathered->data[2 * r + 1], float(r) + 0.5f);
    }
  }, gpuConfig(rt));
}

// A fused allreduce of more tensors than one pack launch holds (1000
// descriptors, device/copy_plan.h), of odd sizes (so each one's offset
// in the fusion buffer is padded to 16 bytes) and some empty: the host
// runtime runs the CUDA runtime's plan launch by launch, chunk by chunk,
// so a launch split or layout slip shows as a wrong value.
TEST(GpuOrchestration, FusedAllreduceOfMoreTensorsThanOnePackLaunch) {
  auto rt = std::make_shared<HostRuntime>(2);
  constexpr size_t kTensors = 1200;  // 1129 of them non-empty
  std::atomic<uint64_t> meanPerResponse{0};
  test::spawn(2, [&](int rank, Engine& engine) {
    const int device = rank;
    std::vector<std::unique_ptr<DeviceFloats>> tensors;
    std::vector<Request> requests;
    std::vector<Entry> entries;
    for (size_t t = 0; t < kTensors; ++t) {
      const size_t n = t % 17 == 5 ? 0 : (t * 7) % 13 + 1;
      tensors.push_back(std::make_unique<DeviceFloats>(*rt, device, n));
      for (size_t i = 0; i < n; ++i) tensors[t]->data[i] = float(rank + 1) * float(i + t % 50);
      requests.push_back(
          cudaRequest("many." + std::to_string(t), OpType::kAllreduce, n, device));
      Entry e;
      e.input = e.output = tensors[t]->data;
      entries.push_back(std::move(e));
    }
    std::vector<Handle> handles = engine.enqueueGroup(requests, std::move(entries));
    for (const Handle& h : handles) ASSERT_TRUE(settle(h).ok()) << h.status().message;
    for (size_t t = 0; t < kTensors; ++t) {
      for (size_t i = 0; i < tensors[t]->n; ++i) {
        ASSERT_EQ(tensors[t]->data[i], 3.0f * float(i + t % 50))
            << "tensor " << t << " [" << i << "]";
      }
    }
    const EngineStats stats = engine.stats();
    EXPECT_EQ(stats.fusedTensors, kTensors);
    // More non-empty tensors per response on average than one launch
    // holds: some response's pack was split over several launches.
    uint64_t nonEmpty = 0;
    for (const auto& t : tensors) nonEmpty += t->n > 0 ? 1 : 0;
    if (rank == 0) meanPerResponse = nonEmpty / std::max<uint64_t>(stats.responses, 1);
  }, gpuConfig(rt));
  EXPECT_GT(meanPerResponse.load(), device::kMaxDescsPerLaunch);
}

// GpuExecutor's fused allreduce puts tensor i of its fusion buffer at
// fusionLayout's offset, a multiple of 16 bytes (comm/layout.h), so no
// tensor takes the kernel's element-by-element path; the planner budgets
// the padding. Read back from the fusion buffer after the pack (one rank:
// the buffer holds the packed inputs).
TEST(GpuOrchestration, FusedAllreducePacksAtSixteenByteAlignedOffsets) {
  auto rt = std::make_shared<HostRuntime>(1);
  auto devices = std::make_shared<comm::cuda::DeviceSet>(rt);
  const Config config = gpuConfig(rt);
  const Identity identity;  // rank 0 of 1
  auto store = rendezvous::makeMapStore(std::make_shared<rendezvous::KeyValueMap>());
  const comm::BackendArgs args{config, identity, store, "127.0.0.1"};
  comm::cuda::GpuExecutor exec(devices, comm::createGpuCollectives("nccl", args, devices), 0, 1);
  const std::vector<uint64_t> counts = {1, 7, 3, 0, 5, 2, 4};
  std::vector<std::unique_ptr<DeviceFloats>> in, out;
  std::vector<comm::cuda::DeviceTensor> tensors;
  for (size_t t = 0; t < counts.size(); ++t) {
    in.push_back(std::make_unique<DeviceFloats>(*rt, 0, counts[t]));
    out.push_back(std::make_unique<DeviceFloats>(*rt, 0, counts[t]));
    for (size_t i = 0; i < counts[t]; ++i) in[t]->data[i] = float(100 * t + i);
    tensors.push_back(comm::cuda::DeviceTensor{in[t]->data, out[t]->data, counts[t]});
  }
  exec.allreduce(0, tensors, DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0);
  exec.synchronize(0);
  const FusionLayout layout = fusionLayout(counts, sizeof(float), kGpuFusionAlignBytes);
  EXPECT_EQ(layout.offsets, (std::vector<uint64_t>{0, 4, 12, 16, 16, 24, 28}));
  const auto* fused = static_cast<const float*>(devices->at(0).fusion(0));  // the same buffer
  for (size_t t = 0; t < counts.size(); ++t) {
    for (size_t i = 0; i < counts[t]; ++i) {
      EXPECT_EQ(fused[layout.offsets[t] + i], float(100 * t + i)) << "tensor " << t << " " << i;
      EXPECT_EQ(out[t]->data[i], float(100 * t + i)) << "tensor " << t << " " << i;
    }
  }
}

TEST(GpuOrchestration, FusedAllreduceBroadcastAllgatherOnTwoRanks) { fusedAllreduceAndFriends(2); }
TEST(GpuOrchestration, FusedAllreduceBroadcastAllgatherOnThreeRanks) { fusedAllreduceAndFriends(3); }

// Defect 3: every process set's collectives go on the engine's one comm
// stream per device, in the one global response order.
TEST(GpuOrchestration, ProcessSetsShareOneCommStreamPerDevice) {
  auto rt = std::make_shared<HostRuntime>(2);
  test::spawnWithSets(3, {{0, 1}}, [&](int rank, Engine& engine) {
    const int device = rank % 2;
    std::vector<void*> streams;
    std::vector<std::unique_ptr<DeviceFloats>> outputs;
    auto gather = [&](int set, int size) {
      DeviceFloats in(*rt, device, 1);
      in.data[0] = float(rank);
      Entry e;
      e.input = in.data;
      e.allocate = [&](const std::vector<int64_t>& shape) -> void* {
        streams.push_back(outputAllocationStream());
        outputs.push_back(std::make_unique<DeviceFloats>(*rt, device, size_t(shape[0])));
        return outputs.back()->data;
      };
      ASSERT_TRUE(settle(engine.enqueue(cudaRequest("g" + std::to_string(set), OpType::kAllgather,
                                                    1, device, set),
                                        std::move(e)))
                      .ok());
      ASSERT_EQ(outputs.back()->n, size_t(size));
    };
    gather(0, 3);
    if (rank < 2) gather(1, 2);
    // Interleaved allreduces of both sets complete, in order, on one stream.
    std::vector<std::unique_ptr<DeviceFloats>> ts;
    std::vector<Handle> hs;
    std::vector<int> sets;
    for (int i = 0; i < 4; ++i) {
      const int set = i % 2;  // set 1 = ranks {0, 1}
      if (set == 1 && rank == 2) continue;
      ts.push_back(std::make_unique<DeviceFloats>(*rt, device, 3));
      for (int k = 0; k < 3; ++k) ts.back()->data[k] = 1.0f;
      Entry e;
      e.input = e.output = ts.back()->data;
      hs.push_back(engine.enqueue(cudaRequest("r" + std::to_string(i), OpType::kAllreduce, 3,
                                              device, set),
                                  std::move(e)));
      sets.push_back(set);
    }
    for (size_t i = 0; i < hs.size(); ++i) {
      ASSERT_TRUE(settle(hs[i]).ok()) << hs[i].status().message;
      EXPECT_EQ(ts[i]->data[0], sets[i] == 0 ? 3.0f : 2.0f);
    }
    ASSERT_FALSE(streams.empty());
    for (void* s : streams) EXPECT_EQ(s, streams[0]) << "a process set got its own comm stream";
    // Rank 2 (not in set 1) finishes first: it shuts down only once ranks 0
    // and 1 are done with set 1, or their last ops fail with its shutdown.
    ASSERT_TRUE(settle(engine.barrier()).ok());
  }, gpuConfig(rt));
}

// --- Fast by construction: one stream wait, a waiter on the done event --------

// A consumer of several operations waits on one done event per device: the
// one enqueued last on the engine's comm stream (shared by every process
// set), which orders it after every operation's output.
TEST(GpuOrchestration, OneWaitOnTheLastDoneEventOrdersAConsumerAfterEveryOutput) {
  auto rt = std::make_shared<HostRuntime>(3);
  test::spawnWithSets(3, {{0, 1}}, [&](int rank, Engine& engine) {
    const int device = rank;
    // The comm stream is held at the first operation's input until the
    // consumer is queued: every operation is enqueued, none is done.
    UserStream user(*rt, device);
    std::promise<void> release;
    user.holdUntil(release.get_future().share());

    std::vector<std::unique_ptr<DeviceFloats>> ts;
    std::vector<Handle> hs;
    std::vector<void*> events;
    std::vector<int> ops;  // which of the three this rank takes part in
    for (int i = 0; i < 3; ++i) {
      const int set = i == 1 ? 1 : 0;  // the middle one in set 1: ranks 0 and 1
      if (set == 1 && rank == 2) continue;
      ops.push_back(i);
      ts.push_back(std::make_unique<DeviceFloats>(*rt, device, 16));
      for (size_t k = 0; k < 16; ++k) ts.back()->data[k] = float((rank + 1) * (i + 1)) + float(k);
      Entry e;
      e.input = e.output = ts.back()->data;
      e.readyEvent = i == 0 ? user.ready : nullptr;
      hs.push_back(engine.enqueue(
          cudaRequest("ordered." + std::to_string(i), OpType::kAllreduce, 16, device, set),
          std::move(e)));
      // Each its own response, with its own done event.
      events.push_back(hs.back().waitEnqueued());
    }
    const size_t n = hs.size();
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NE(events[i], nullptr) << "operation " << i << " done before its input was ready";
      for (size_t j = 0; j < i; ++j) EXPECT_NE(events[i], events[j]) << "fused: nothing to order";
    }
    // Whatever the order handed in, the one event is the last enqueued.
    for (size_t rot = 0; rot < n; ++rot) {
      std::vector<const Handle*> in;
      for (size_t i = 0; i < n; ++i) in.push_back(&hs[(i + rot) % n]);
      in.push_back(nullptr);
      const std::vector<Handle::DoneEvent> last = Handle::lastDoneEvents(in);
      ASSERT_EQ(last.size(), 1u) << "one comm stream: one wait";
      EXPECT_EQ(last[0].event, events[n - 1]);
      EXPECT_EQ(last[0].device, device);
    }
    std::vector<const Handle*> all;
    for (const Handle& h : hs) all.push_back(&h);
    // A consumer stream waits on that event alone, then reads every output.
    const std::vector<Handle::DoneEvent> last = Handle::lastDoneEvents(all);
    device::Stream consumer = rt->createStream(device);
    rt->wait(consumer, static_cast<device::Event>(last.at(0).event));
    std::vector<float> seen(n * 16, -1.0f);
    rt->launch(consumer, Stage::kCopy, [&] {
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < 16; ++k) seen[i * 16 + k] = ts[i]->data[k];
      }
    });
    release.set_value();
    rt->synchronize(consumer);
    for (size_t i = 0; i < n; ++i) {
      const int op = ops[i];
      const int members = op == 1 ? 2 : 3;
      for (size_t k = 0; k < 16; ++k) {
        // Sum over the members r of (r + 1) * (op + 1) + k.
        const float want =
            float(members * (members + 1) / 2 * (op + 1)) + float(members) * float(k);
        ASSERT_EQ(seen[i * 16 + k], want) << "the consumer read operation " << op << "'s output ["
                                          << k << "] before it was reduced";
      }
    }
    for (const Handle& h : hs) EXPECT_TRUE(settle(h).ok()) << h.status().message;
    // Done operations need no wait at all.
    EXPECT_TRUE(Handle::lastDoneEvents(all).empty());
    rt->destroyStream(consumer);
  }, gpuConfig(rt));
}

// A waiter of a CUDA operation returns once the device reached the done
// event, without waiting for a host function, and its report lets the
// completion watcher run the op's callback: here every host function is
// held until both ranks saw their op done and its callback run.
TEST(GpuOrchestration, AWaiterReturnsAndTheCallbacksRunWhileHostFunctionsAreHeld) {
  auto rt = std::make_shared<HostRuntime>(2);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  rt->beforeHostFunctions([released] { (void)released.wait_for(kLimit); });
  std::atomic<int> returned{0};
  std::atomic<int> completed{0};
  Config config = gpuConfig(rt);
  config.spinTime = std::chrono::seconds(1);  // the waiters poll the event
  test::spawn(2, [&](int rank, Engine& engine) {
    DeviceFloats t(*rt, rank, 8);
    for (size_t k = 0; k < 8; ++k) t.data[k] = float(rank + 1);
    std::atomic<bool> onDoneRan{false};
    Handle h = allreduce(engine, "held", t, rank, nullptr, [&](const Status& s) {
      EXPECT_TRUE(s.ok()) << s.message;
      onDoneRan = true;
      ++completed;
    });
    const bool ok = h.waitFor(kLimit);
    // The waiter reported the fence to the watcher, which runs the op's
    // callback without a host function (GpuOps::flushSignals).
    const auto until = std::chrono::steady_clock::now() + kLimit;
    while (!onDoneRan.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const bool callbackRan = onDoneRan.load();
    if (++returned == 2) release.set_value();  // both ranks are past the checks
    (void)released.wait_for(kLimit);
    ASSERT_TRUE(ok) << "rank " << rank << ": the waiter waited for a held host function";
    EXPECT_TRUE(callbackRan) << "rank " << rank
                             << ": the op's callback waited for a held host function";
    // Done for every reader, with the results in place.
    EXPECT_TRUE(h.poll());
    EXPECT_TRUE(h.status().ok()) << h.status().message;
    EXPECT_NO_THROW(h.wait());
    for (size_t k = 0; k < 8; ++k) EXPECT_EQ(t.data[k], 3.0f);
    // The watcher's late finish changes nothing; the engine goes on.
    DeviceFloats next(*rt, rank, 4);
    EXPECT_TRUE(settle(allreduce(engine, "next", next, rank)).ok());
  }, config);
  EXPECT_EQ(completed.load(), 2) << "every completion callback still ran";
}


// Once a rank queued a CUDA operation, only its loop thread runs cycles: a
// waiting caller must not execute CUDA work on its own thread (the device is
// the loop thread's, pinned once). Later CPU operations' callbacks run there
// too, also for a caller that waits synchronously (CallerCycles tests the
// CPU-only case, where the caller runs them).
TEST(GpuOrchestration, AfterACudaOperationOnlyTheLoopThreadRunsCycles) {
  auto rt = std::make_shared<HostRuntime>(2);
  // No op may wait out a cycle time (a push right after a wait left the
  // loop thread asleep once, as if the caller would run the cycle).
  Config config = gpuConfig(rt);
  config.cycleTime = std::chrono::seconds(60);
  test::spawn(2, [&](int rank, Engine& engine) {
    DeviceFloats t(*rt, rank, 8);
    ASSERT_TRUE(settle(allreduce(engine, "gpu", t, rank)).ok());
    const auto me = std::this_thread::get_id();
    for (int i = 0; i < 50; ++i) {
      std::vector<float> v(4, float(rank));
      std::thread::id ranOn;
      Entry e{v.data(), v.data(), {}, {}};
      e.onDone = [&](const Status&) { ranOn = std::this_thread::get_id(); };
      Request q;
      q.name = "cpu";
      q.op = OpType::kAllreduce;
      q.dtype = DataType::kFloat32;
      q.shape = {4};
      engine.enqueue(q, e).wait();
      ASSERT_EQ(v[0], 1.0f);
      ASSERT_NE(ranOn, me) << "op " << i << " ran its cycle on the caller's thread";
    }
  }, config, std::chrono::seconds(50));
}


// Entry::onEnqueued: a CUDA operation tells its caller when its GPU work is
// queued (with the done event), before the GPU ran it; onDone follows once
// the GPU finished. A CPU operation hears onDone only.
TEST(GpuOrchestration, OnEnqueuedComesWhenTheWorkIsQueuedAndBeforeOnDone) {
  auto rt = std::make_shared<HostRuntime>(2);
  test::spawn(2, [&](int rank, Engine& engine) {
    DeviceFloats t(*rt, rank, 8);
    for (size_t k = 0; k < 8; ++k) t.data[k] = float(rank + 1);
    UserStream user(*rt, rank);
    std::promise<void> produce;
    user.holdUntil(produce.get_future().share());  // the input is not ready yet
    std::promise<void*> enqueued;
    std::atomic<bool> doneRan{false};
    std::atomic<bool> doneBeforeEnqueued{false};
    std::atomic<bool> enqueuedSeen{false};
    Entry e;
    e.input = t.data;
    e.output = t.data;
    e.readyEvent = user.ready;
    e.onEnqueued = [&](void* event) {
      enqueuedSeen = true;
      enqueued.set_value(event);
    };
    e.onDone = [&](const Status& s) {
      EXPECT_TRUE(s.ok()) << s.message;
      if (!enqueuedSeen.load()) doneBeforeEnqueued = true;
      doneRan = true;
    };
    Handle h = engine.enqueue(cudaRequest("noticed", OpType::kAllreduce, 8, rank), std::move(e));
    std::future<void*> notice = enqueued.get_future();
    ASSERT_EQ(notice.wait_for(kLimit), std::future_status::ready)
        << "rank " << rank << ": no enqueued notice while the input was held";
    EXPECT_NE(notice.get(), nullptr) << "the notice carries the done event";
    EXPECT_FALSE(doneRan.load()) << "the GPU cannot have finished: its input is held";
    produce.set_value();
    EXPECT_TRUE(settle(h).ok());
    const auto until = std::chrono::steady_clock::now() + kLimit;
    while (!doneRan.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(doneRan.load());
    EXPECT_FALSE(doneBeforeEnqueued.load());
    for (size_t k = 0; k < 8; ++k) EXPECT_EQ(t.data[k], 3.0f);

    // CPU: onDone is the only notice.
    std::vector<float> cpu(4, 1.0f);
    std::atomic<bool> cpuEnqueued{false};
    Entry c;
    c.input = cpu.data();
    c.output = cpu.data();
    c.onEnqueued = [&](void*) { cpuEnqueued = true; };
    Request cq;
    cq.name = "cpu";
    cq.shape = {4};
    Handle hc = engine.enqueue(std::move(cq), std::move(c));
    hc.wait();
    EXPECT_FALSE(cpuEnqueued.load());
  }, gpuConfig(rt));
}

}  // namespace
}  // namespace kolo
