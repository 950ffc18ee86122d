// The engine's hand-offs for small operations: handles a waiter may poll
// (spin) before it sleeps, a queue that notifies the loop only while it
// sleeps, the loop polling briefly after work, and KOLO_SPIN_TIME.
#include <gtest/gtest.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "execution/handle_state.h"
#include "engine/tensor_queue.h"
#include "harness/harness.h"
#include "kolo/config.h"

namespace kolo::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// CPU time of the calling thread.
std::chrono::nanoseconds threadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

std::shared_ptr<HandleState> stateWithSpin(microseconds spin) {
  auto s = std::make_shared<HandleState>();
  s->spin = spin;
  return s;
}

class HandleSpin : public ::testing::TestWithParam<int> {};  // spin in microseconds

TEST_P(HandleSpin, WaitersWakeWhetherTheySpinOrSleep) {
  const microseconds spin(GetParam());
  for (int delayUs : {0, 20, 2000}) {
    SCOPED_TRACE(delayUs);
    auto state = stateWithSpin(spin);
    Handle handle(state);
    std::atomic<int> woke{0};
    std::vector<std::thread> waiters;
    for (int i = 0; i < 3; ++i) {
      waiters.emplace_back([&] {
        handle.wait();
        ++woke;
      });
    }
    std::this_thread::sleep_for(microseconds(delayUs));
    EXPECT_FALSE(handle.poll());
    state->finish(Status::Ok());
    state->wake();
    for (auto& t : waiters) t.join();
    EXPECT_EQ(woke.load(), 3);
    EXPECT_TRUE(handle.poll());
    EXPECT_TRUE(handle.enqueued());
    EXPECT_EQ(state->sleepers.load(), 0);
  }
}

TEST_P(HandleSpin, WaitForTimesOutAndCarriesTheError) {
  auto state = stateWithSpin(microseconds(GetParam()));
  Handle handle(state);
  const auto start = Clock::now();
  EXPECT_FALSE(handle.waitFor(milliseconds(20)));
  EXPECT_GE(Clock::now() - start, milliseconds(20));
  EXPECT_FALSE(handle.waitFor(milliseconds(0)));
  EXPECT_EQ(state->sleepers.load(), 0);
  std::thread finisher([&] {
    std::this_thread::sleep_for(milliseconds(5));
    state->finish(Status{ErrorCode::kMismatch, "'t': rank 1 sent float32[3]"});
    state->wake();
  });
  EXPECT_TRUE(handle.waitFor(std::chrono::hours(1)));
  finisher.join();
  try {
    handle.wait();
    FAIL() << "wait() did not throw the operation's error";
  } catch (const Mismatch& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 sent"), std::string::npos) << e.what();
  }
}

TEST_P(HandleSpin, WaitEnqueuedReturnsTheEventAtTheFirstStage) {
  auto state = stateWithSpin(microseconds(GetParam()));
  Handle handle(state);
  auto event = std::make_shared<int>(7);
  std::thread stage([&] {
    std::this_thread::sleep_for(milliseconds(2));
    state->markEnqueued(event);
    state->wake();
  });
  EXPECT_EQ(handle.waitEnqueued(), event.get());
  stage.join();
  EXPECT_TRUE(handle.enqueued());
  EXPECT_FALSE(handle.poll());
  state->finish(Status::Ok());
  state->wake();
  EXPECT_EQ(handle.waitEnqueued(), nullptr);  // done: nothing left to wait on
}

INSTANTIATE_TEST_SUITE_P(Spin, HandleSpin, ::testing::Values(0, 50, 100000),
                         [](const auto& info) { return "us" + std::to_string(info.param); });

TEST(TensorQueueWait, SleepsWithoutSpinningAndWakesOnPush) {
  TensorQueue queue;
  // No spin window: a wait of 300 ms costs (next to) no CPU.
  const auto cpu = threadCpu();
  const auto start = Clock::now();
  queue.waitForWork(start + milliseconds(300), start - milliseconds(1));
  EXPECT_GE(Clock::now() - start, milliseconds(300));
  EXPECT_LT(threadCpu() - cpu, milliseconds(20)) << "the loop burned CPU while idle";

  // A push wakes the loop whether it is in its spin window or asleep after it.
  for (int spinUs : {0, 200, 500000}) {
    SCOPED_TRACE(spinUs);
    std::thread pusher([&] {
      std::this_thread::sleep_for(milliseconds(20));
      std::vector<PendingOp> ops(1);
      ops[0].msg.request.name = "t" + std::to_string(spinUs);
      ops[0].handle = std::make_shared<HandleState>();
      queue.push(std::move(ops));
    });
    const auto t0 = Clock::now();
    queue.waitForWork(t0 + std::chrono::seconds(30), t0 + microseconds(spinUs));
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10)) << "a push did not wake the loop";
    pusher.join();
    std::vector<PendingOp> drained;
    queue.drainInto(drained);
    ASSERT_EQ(drained.size(), 1u);
  }
  // wake() too, and nothing is left to wake it a second time.
  std::thread waker([&] {
    std::this_thread::sleep_for(milliseconds(20));
    queue.wake();
  });
  const auto t1 = Clock::now();
  queue.waitForWork(t1 + std::chrono::seconds(30), t1);
  EXPECT_LT(Clock::now() - t1, std::chrono::seconds(10));
  waker.join();
  const auto t2 = Clock::now();
  queue.waitForWork(t2 + milliseconds(30));
  EXPECT_GE(Clock::now() - t2, milliseconds(30)) << "a consumed wake-up woke the loop again";
}

TEST(SpinTimeConfig, ParsedFromTheEnvironment) {
  auto lookup = [](std::map<std::string, std::string> vars) {
    return [vars](const std::string& name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  };
  EXPECT_FALSE(Config::fromEnv(lookup({})).spinTime.has_value());
  EXPECT_EQ(Config::fromEnv(lookup({{"KOLO_SPIN_TIME", "0"}})).spinTime, microseconds(0));
  EXPECT_EQ(Config::fromEnv(lookup({{"KOLO_SPIN_TIME", "25"}})).spinTime, microseconds(25));
  for (const char* bad : {"-1", "fast", "2.5"}) {
    SCOPED_TRACE(bad);
    try {
      Config::fromEnv(lookup({{"KOLO_SPIN_TIME", bad}}));
      ADD_FAILURE() << "accepted KOLO_SPIN_TIME=" << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("KOLO_SPIN_TIME"), std::string::npos) << e.what();
    }
  }
}

// Back-to-back small allreduces with the loop and the waiters spinning (and
// with spinning off): every result right, every handle done when wait
// returns, and the engines sleep again once idle (shutdown is prompt).
class EngineSpin : public ::testing::TestWithParam<int> {};

TEST_P(EngineSpin, BackToBackSmallAllreducesAreCorrect) {
  Config config = testConfig();
  config.spinTime = microseconds(GetParam());
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared memory" : "gloo");
    config.shm = shm;
    spawn(
        2,
        [](int rank, Engine& engine) {
          for (int i = 0; i < 300; ++i) {
            std::vector<float> v(i % 3 == 0 ? 16384 : 1, static_cast<float>(rank + i));
            Request q;
            q.name = "small." + std::to_string(i % 3);
            q.dtype = DataType::kFloat32;
            q.shape = {static_cast<int64_t>(v.size())};
            Handle h = engine.enqueue(q, Entry{v.data(), v.data(), {}, {}});
            h.wait();
            ASSERT_TRUE(h.poll());
            ASSERT_EQ(v.front(), static_cast<float>(1 + 2 * i)) << i;
            ASSERT_EQ(v.back(), static_cast<float>(1 + 2 * i)) << i;
          }
          std::this_thread::sleep_for(milliseconds(5));  // past the spin window: asleep
          engine.barrier().wait();
        },
        config);
  }
}

INSTANTIATE_TEST_SUITE_P(Spin, EngineSpin, ::testing::Values(0, 200),
                         [](const auto& info) { return "us" + std::to_string(info.param); });

}  // namespace
}  // namespace kolo::test
