// Two groups of the same two ranks whose GPU allreduces are enqueued in
// opposite orders on the two ranks, over the host device runtime (one
// device per rank, a collective holding its device as an NCCL kernel does):
// as two process sets of one engine per process they complete, because the
// engine issues every set's GPU work in one order that both ranks share; as
// one engine per group, the same program issues the two cliques'
// collectives in different orders on the two devices, and the runtime
// fails them (where NCCL would hang).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/gpu_orchestration_util.h"

namespace kolo::gpu_test {
namespace {

Handle allreduceIn(Engine& engine, int set, const std::string& name, DeviceFloats& t, int device,
                   void* ready) {
  Entry e;
  e.input = t.data;
  e.output = t.data;
  e.readyEvent = ready;
  Request q = cudaRequest(name, OpType::kAllreduce, t.n, device, set);
  return engine.enqueue(q, std::move(e));
}

// Polls pred until it holds or kLimit passed; false then.
bool eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + kLimit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// What one rank saw: the status of each group's allreduce and its values.
struct Outcome {
  Status a, b;
  float aValue = 0, bValue = 0;
};

// The program, on rank (device rank) of 2: an allreduce in group A and one
// in group B. Rank 0 enqueues A first, rank 1 B first, and each holds the
// input of its second one (a producer on another device) until its device
// cannot go on by itself, so that on device 0 A's collective is issued
// before B's and on device 1 B's before A's wherever the engines let them.
Outcome crossOrder(HostRuntime& rt, int rank, test::ThreadBarrier& settledBoth, Engine& engineA,
                   int setA, Engine& engineB, int setB) {
  DeviceFloats a(rt, rank, 4), b(rt, rank, 4);
  for (size_t i = 0; i < 4; ++i) {
    a.data[i] = float(rank + 1);
    b.data[i] = float(10 * (rank + 1));
  }
  UserStream producer(rt, 2 + rank);
  std::promise<void> release;
  producer.holdUntil(release.get_future().share());
  Handle ha, hb;
  if (rank == 0) {
    ha = allreduceIn(engineA, setA, "a", a, rank, nullptr);
    hb = allreduceIn(engineB, setB, "b", b, rank, producer.ready);
  } else {
    hb = allreduceIn(engineB, setB, "b", b, rank, nullptr);
    ha = allreduceIn(engineA, setA, "a", a, rank, producer.ready);
  }
  const bool settled = eventually([&] {
    return (ha.enqueued() || ha.poll()) && (hb.enqueued() || hb.poll()) && rt.settled(rank);
  });
  settledBoth.arrive();
  release.set_value();
  EXPECT_TRUE(settled) << "rank " << rank << ": its device never settled";
  Outcome out;
  out.a = settle(ha);
  out.b = settle(hb);
  out.aValue = a.data[0];
  out.bValue = b.data[0];
  return out;
}

TEST(GpuCrossOrder, TwoSetsOfOneEngineCompleteInEitherOrder) {
  auto rt = std::make_shared<HostRuntime>(4);  // devices 0, 1: the ranks; 2, 3: producers
  const Config config = gpuConfig(rt, std::chrono::seconds(10));
  auto store = makeHashStore();
  test::ThreadBarrier settledBoth(2);
  std::vector<Outcome> outcomes(2);
  test::runRanks(2, [&](int rank) {
    Engine engine(config, test::localIdentity(rank, 2), store);
    const int setA = engine.addLocalProcessSet("group A", {0, 1});
    const int setB = engine.addLocalProcessSet("group B", {0, 1});
    outcomes[rank] = crossOrder(*rt, rank, settledBoth, engine, setA, engine, setB);
    engine.shutdown();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(outcomes[r].a.ok()) << "rank " << r << ": " << outcomes[r].a.message;
    EXPECT_TRUE(outcomes[r].b.ok()) << "rank " << r << ": " << outcomes[r].b.message;
    EXPECT_EQ(outcomes[r].aValue, 3.0f);
    EXPECT_EQ(outcomes[r].bValue, 30.0f);
  }
}

TEST(GpuCrossOrder, OneEnginePerGroupFailsOnTheHostRuntimesDevices) {
  auto rt = std::make_shared<HostRuntime>(4);
  const Config config = gpuConfig(rt, std::chrono::seconds(10));
  auto storeA = makeHashStore();
  auto storeB = makeHashStore();
  test::ThreadBarrier settledBoth(2);
  std::vector<Outcome> outcomes(2);
  test::runRanks(2, [&](int rank) {
    Engine engineA(config, test::localIdentity(rank, 2), storeA);
    Engine engineB(config, test::localIdentity(rank, 2), storeB);
    outcomes[rank] = crossOrder(*rt, rank, settledBoth, engineA, 0, engineB, 0);
  });
  const std::string rule = "collectives issued in different orders on different devices";
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(outcomes[r].a.ok()) << "rank " << r;
    EXPECT_FALSE(outcomes[r].b.ok()) << "rank " << r;
    EXPECT_TRUE(mentions(outcomes[r].a, rule) || mentions(outcomes[r].b, rule))
        << "rank " << r << ": " << outcomes[r].a.message << " / " << outcomes[r].b.message;
  }
}

}  // namespace
}  // namespace kolo::gpu_test
