// A caller waiting for its operation runs the engine's cycles itself while
// the loop thread is idle (CycleGate, Engine::Impl::driveUntilDone): the
// cycle then runs on the caller's thread, an op nobody waits for still
// completes, failures and shutdown reach a driving caller, and a callback
// on the caller's thread may abort without waiting for itself. CUDA
// operations and join keep the cycles on the loop thread
// (gpu_orchestration_test.cc). Every wait is bounded by the harness.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/ops_util.h"
#include "harness/harness.h"

namespace kolo::test {
namespace {

using namespace std::chrono_literals;

Request floats(const std::string& name, size_t n) {
  return makeRequest(name, OpType::kAllreduce, DataType::kFloat32, {static_cast<int64_t>(n)});
}

// Back-to-back synchronous allreduces: right results, and the cycles of
// (nearly) all of them ran on the caller's thread, where the completion
// callback then runs. The first may go to the loop thread (a push wakes it
// when no caller drove lately), as may one whose caller was descheduled
// past the drive window on a loaded machine: at least one must not.
TEST(CallerCycles, ASynchronousCallerRunsTheCycleOnItsOwnThread) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared memory" : "gloo");
    Config config = testConfig();
    config.shm = shm;
    spawn(
        2,
        [](int rank, Engine& engine) {
          const auto me = std::this_thread::get_id();
          int onCaller = 0;
          for (int i = 0; i < 200; ++i) {
            std::vector<float> v(i % 2 == 0 ? 16384 : 1, static_cast<float>(rank + i));
            std::thread::id ranOn;
            Entry e{v.data(), v.data(), {}, {}};
            e.onDone = [&](const Status&) { ranOn = std::this_thread::get_id(); };
            Handle h = engine.enqueue(floats("sync." + std::to_string(i % 2), v.size()), e);
            h.wait();
            ASSERT_EQ(v.front(), static_cast<float>(1 + 2 * i)) << i;
            ASSERT_EQ(v.back(), static_cast<float>(1 + 2 * i)) << i;
            onCaller += ranOn == me ? 1 : 0;
          }
          EXPECT_GT(onCaller, 0) << "no cycle ran on the waiting caller's thread";
        },
        config);
  }
}

// Right after synchronous ops (pushes then leave the loop thread asleep),
// an op that nobody waits for (polled only) is still taken over by the loop
// thread and completes.
TEST(CallerCycles, AnOpNobodyWaitsForStillCompletesRightAfterSynchronousOnes) {
  spawn(2, [](int rank, Engine& engine) {
    for (int round = 0; round < 20; ++round) {
      std::vector<float> a(8, 1.0f);
      engine.enqueue(floats("a", a.size()), Entry{a.data(), a.data(), {}, {}}).wait();
      std::vector<float> b(8, static_cast<float>(rank));
      Handle h = engine.enqueue(floats("b", b.size()), Entry{b.data(), b.data(), {}, {}});
      const auto deadline = std::chrono::steady_clock::now() + 20s;
      while (!h.poll()) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "round " << round;
        std::this_thread::sleep_for(50us);
      }
      ASSERT_EQ(b[0], 1.0f) << "round " << round;
    }
  });
}

// A completion callback that aborts the engine runs on the caller that
// drives the cycle: abort must not wait for the loop to end (that thread
// is in the cycle), the caller's next wait fails with the message, and the
// peer fails naming this rank.
TEST(CallerCycles, ACallbackThatAbortsOnTheDrivingCallerDoesNotWaitForItself) {
  auto store = makeHashStore();
  std::vector<std::string> errors(2);
  runRanks(
      2,
      [&](int rank) {
        Engine engine(testConfig(), localIdentity(rank, 2), store);
        std::vector<float> v(4, 1.0f);
        for (int i = 0; i < 50; ++i) {
          engine.enqueue(floats("warm", 4), Entry{v.data(), v.data(), {}, {}}).wait();
        }
        Entry e{v.data(), v.data(), {}, {}};
        if (rank == 0) e.onDone = [&](const Status&) { engine.abort("stopped by a callback"); };
        engine.enqueue(floats("last", 4), e).wait();
        try {
          engine.enqueue(floats("after", 4), Entry{v.data(), v.data(), {}, {}}).wait();
          ADD_FAILURE() << "rank " << rank << ": an op after the abort completed";
        } catch (const Error& err) {
          errors[rank] = err.what();
        }
      },
      60s);
  EXPECT_NE(errors[0].find("stopped by a callback"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("stopped by a callback"), std::string::npos) << errors[1];
}

// A caller drives a wait that cannot complete (its peer never submits);
// shutdown from another thread ends it with the shutdown status, and
// returns promptly.
TEST(CallerCycles, ShutdownEndsTheWaitOfADrivingCaller) {
  auto store = makeHashStore();
  runRanks(
      2,
      [&](int rank) {
        Engine engine(testConfig(), localIdentity(rank, 2), store);
        std::vector<float> v(4, 1.0f);
        engine.enqueue(floats("both", 4), Entry{v.data(), v.data(), {}, {}}).wait();
        if (rank == 1) {
          engine.barrier().wait();
          return;  // the harness's engine goes: shutdown
        }
        auto waiter = std::async(std::launch::async, [&] {
          try {
            engine.enqueue(floats("only.rank0", 4), Entry{v.data(), v.data(), {}, {}}).wait();
            return std::string("completed");
          } catch (const Error& err) {
            return std::string(err.what());
          }
        });
        engine.barrier().wait();
        std::this_thread::sleep_for(50ms);  // the waiter is in its cycles by now, or soon
        const auto start = std::chrono::steady_clock::now();
        engine.shutdown();
        EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
        ASSERT_EQ(waiter.wait_for(30s), std::future_status::ready) << "the waiter did not end";
        EXPECT_NE(waiter.get(), "completed");
      },
      90s);
}

// While this rank has joined, its loop thread runs the cycles (a joined rank
// takes part in operations it did not submit, CUDA ones included), also
// while its caller waits for the join: the ops rank 0 runs alone come out
// right. Once the join completed, callers run cycles again. (This failed in
// about a third of runs while a loop thread that had run the join's cycles
// finished each op before its caller waited, and so took the next one too:
// CycleGate::lastWaitNs.)
TEST(CallerCycles, AJoinedRankLeavesTheCyclesToTheLoopThreadUntilTheJoinCompletes) {
  spawn(2, [](int rank, Engine& engine) {
    const auto me = std::this_thread::get_id();
    std::vector<float> v(4, 1.0f);
    if (rank == 1) {
      Handle join = engine.join();
      // Rank 0's allreduces run here with zeros for this rank, on the loop
      // thread; their callbacks are rank 0's.
      join.wait();
    } else {
      for (int i = 0; i < 20; ++i) {
        std::fill(v.begin(), v.end(), 1.0f);
        engine.enqueue(floats("alone", 4), Entry{v.data(), v.data(), {}, {}}).wait();
        ASSERT_EQ(v[0], 1.0f);
      }
      engine.join().wait();
    }
    int onCaller = 0;
    for (int i = 0; i < 100; ++i) {
      std::fill(v.begin(), v.end(), 1.0f);
      std::thread::id ranOn;
      Entry e{v.data(), v.data(), {}, {}};
      e.onDone = [&](const Status&) { ranOn = std::this_thread::get_id(); };
      engine.enqueue(floats("after", 4), e).wait();
      ASSERT_EQ(v[0], 2.0f);
      onCaller += ranOn == me ? 1 : 0;
    }
    EXPECT_GT(onCaller, 0) << "callers no longer run cycles after the join completed";
  });
}

}  // namespace
}  // namespace kolo::test
