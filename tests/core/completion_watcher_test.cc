// The GPU path's completion logic without a GPU: CompletionWatcher (fences
// a device passes in order, signalled from another thread as a CUDA host
// function would) and the two-stage handles of CUDA operations. Every wait
// is bounded by an event with a generous limit, never by a tight sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "common/completion_watcher.h"
#include "execution/handle_state.h"
#include "kolo/engine.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;
using Clock = CompletionWatcher::Clock;

// Bounds every wait of these tests: far above what a loaded machine needs.
constexpr auto kLimit = 30s;

// What the callbacks saw, in the order they ran.
struct Record {
  std::mutex mu;
  std::vector<std::pair<int, Status>> calls;
  std::vector<std::thread::id> threads;
  std::vector<Clock::time_point> signalled;

  CompletionWatcher::Callback callback(int tag) {
    return [this, tag](const Status& s, Clock::time_point at) {
      std::lock_guard<std::mutex> lock(mu);
      calls.emplace_back(tag, s);
      threads.push_back(std::this_thread::get_id());
      signalled.push_back(at);
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return calls.size();
  }
};

// Waits until pred() holds, at most kLimit; false on time-out.
template <typename Pred>
bool eventually(Pred pred) {
  const auto deadline = Clock::now() + kLimit;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

CompletionWatcher::Options quietOptions() {
  CompletionWatcher::Options o;
  o.what = "GPU work on cuda:0";
  o.timeout = std::chrono::milliseconds(std::chrono::minutes(10));
  o.checkInterval = 20ms;
  return o;
}

TEST(CompletionWatcher, CallbacksRunInFenceOrderOnItsOwnThread) {
  Record rec;
  {
    CompletionWatcher w(quietOptions());
    std::vector<uint64_t> fences;
    for (int i = 0; i < 3; ++i) {
      fences.push_back(w.open());
      w.then(fences.back(), rec.callback(i));
    }
    EXPECT_EQ(fences, (std::vector<uint64_t>{1, 2, 3}));
    EXPECT_EQ(w.pending(), 3u);
    // The device passes the fences from another thread (a CUDA host function).
    std::thread device([&] {
      for (int i = 0; i < 3; ++i) w.signal();
    });
    device.join();
    ASSERT_TRUE(eventually([&] { return rec.size() == 3; }));
    EXPECT_EQ(w.pending(), 0u);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rec.calls[i].first, i);
    EXPECT_TRUE(rec.calls[i].second.ok()) << rec.calls[i].second.message;
    EXPECT_NE(rec.threads[i], std::this_thread::get_id());
    EXPECT_NE(rec.signalled[i], Clock::time_point{});
  }
}

TEST(CompletionWatcher, AFenceSignalledBeforeItsCallbackCompletesWhenAttached) {
  Record rec;
  CompletionWatcher w(quietOptions());
  const uint64_t a = w.open();
  const uint64_t b = w.open();
  w.signal();
  w.signal();  // the GPU was faster than the loop thread
  w.then(a, rec.callback(1));
  ASSERT_TRUE(eventually([&] { return rec.size() == 1; }));
  // A later fence waits for its callback; nothing is lost meanwhile.
  w.then(b, rec.callback(2));
  ASSERT_TRUE(eventually([&] { return rec.size() == 2; }));
  EXPECT_TRUE(rec.calls[1].second.ok());
}

TEST(CompletionWatcher, OnlyReachedFencesComplete) {
  Record rec;
  CompletionWatcher w(quietOptions());
  for (int i = 0; i < 3; ++i) w.then(w.open(), rec.callback(i));
  w.signal();
  ASSERT_TRUE(eventually([&] { return rec.size() == 1; }));
  // No signal for the others: they stay pending (a generous moment).
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(rec.size(), 1u);
  EXPECT_EQ(w.pending(), 2u);
  w.signal();
  w.signal();
  ASSERT_TRUE(eventually([&] { return rec.size() == 3; }));
}

// Defect 5 of the first-GPU-run review: a fence whose then() never came
// (the loop thread threw between enqueuing a response and handing it off)
// must not wedge the watcher or drain() once the work has failed.
TEST(CompletionWatcher, AFenceWithoutCallbackDoesNotWedgeAfterAFailure) {
  Record rec;
  CompletionWatcher w(quietOptions());
  const uint64_t orphan = w.open();  // its then() never comes
  w.then(w.open(), rec.callback(2));
  w.fail(Status{ErrorCode::kInternal, "the response threw after enqueuing"});
  ASSERT_TRUE(eventually([&] { return rec.size() == 1; }))
      << "the fence after a callback-less one never settled";
  EXPECT_EQ(rec.calls[0].second.code, ErrorCode::kInternal);
  auto drained = std::async(std::launch::async, [&] { w.drain(); });
  ASSERT_EQ(drained.wait_for(kLimit), std::future_status::ready) << "drain() wedged";
  // A late then() on the settled fence runs at once, with the failure.
  w.then(orphan, rec.callback(1));
  ASSERT_EQ(rec.size(), 2u);
  EXPECT_EQ(rec.calls[1].first, 1);
  EXPECT_EQ(rec.calls[1].second.code, ErrorCode::kInternal);
}

// A signal that arrives after the device work failed (the unpack and the
// host function behind an aborted collective still run) is no success: the
// health check is asked before a fence completes.
TEST(CompletionWatcher, ASignalAfterAnAsyncErrorIsNoSuccess) {
  std::atomic<bool> broken{false};
  std::atomic<int> aborted{0};
  auto options = quietOptions();
  options.checkInterval = std::chrono::minutes(10);  // only the completion-time check counts
  options.check = [&] {
    return broken ? Status{ErrorCode::kPeerFailure, "collective aborted by a peer"}
                  : Status::Ok();
  };
  options.onFailure = [&](const Status&) { ++aborted; };
  Record rec;
  CompletionWatcher w(options);
  w.then(w.open(), rec.callback(1));
  w.signal();
  ASSERT_TRUE(eventually([&] { return rec.size() == 1; }));
  EXPECT_TRUE(rec.calls[0].second.ok());
  broken = true;
  w.then(w.open(), rec.callback(2));
  w.signal();
  ASSERT_TRUE(eventually([&] { return rec.size() == 2; }));
  EXPECT_EQ(rec.calls[1].second.code, ErrorCode::kPeerFailure);
  EXPECT_EQ(aborted.load(), 1);
}

TEST(CompletionWatcher, TimeoutFailsOpenFencesNamingTheWorkAndStopsTheDevice) {
  std::atomic<int> aborted{0};
  auto options = quietOptions();
  options.timeout = 100ms;
  options.onFailure = [&](const Status&) { ++aborted; };
  Record rec;
  CompletionWatcher w(options);
  w.then(w.open(), rec.callback(1));
  w.signal();  // the first one made it
  w.then(w.open(), rec.callback(2));
  w.then(w.open(), rec.callback(3));
  ASSERT_TRUE(eventually([&] { return rec.size() == 3; }));
  EXPECT_TRUE(rec.calls[0].second.ok());
  for (int i : {1, 2}) {
    EXPECT_EQ(rec.calls[i].second.code, ErrorCode::kTimeout);
    EXPECT_NE(rec.calls[i].second.message.find("GPU work on cuda:0"), std::string::npos)
        << rec.calls[i].second.message;
    EXPECT_NE(rec.calls[i].second.message.find("KOLO_TIMEOUT"), std::string::npos);
  }
  EXPECT_EQ(aborted.load(), 1);
  EXPECT_EQ(w.failure().code, ErrorCode::kTimeout);
  // After a failure every fence fails at once, and late signals change nothing.
  w.signal();
  w.then(w.open(), rec.callback(4));
  ASSERT_TRUE(eventually([&] { return rec.size() == 4; }));
  EXPECT_EQ(rec.calls[3].second.code, ErrorCode::kTimeout);
  EXPECT_EQ(aborted.load(), 1);
}

TEST(CompletionWatcher, AsynchronousErrorFailsTheWorkInFlight) {
  std::atomic<bool> broken{false};
  std::atomic<int> aborted{0};
  auto options = quietOptions();
  options.check = [&] {
    return broken ? Status{ErrorCode::kPeerFailure, "nccl collective failed: remote process exited"}
                  : Status::Ok();
  };
  options.onFailure = [&](const Status&) { ++aborted; };
  Record rec;
  CompletionWatcher w(options);
  w.then(w.open(), rec.callback(1));
  w.then(w.open(), rec.callback(2));
  w.signal();
  ASSERT_TRUE(eventually([&] { return rec.size() == 1; }));
  broken = true;  // a peer died: NCCL reports it asynchronously
  ASSERT_TRUE(eventually([&] { return rec.size() == 2; }));
  EXPECT_TRUE(rec.calls[0].second.ok());
  EXPECT_EQ(rec.calls[1].second.code, ErrorCode::kPeerFailure);
  EXPECT_NE(rec.calls[1].second.message.find("remote process exited"), std::string::npos);
  EXPECT_EQ(aborted.load(), 1);
}

TEST(CompletionWatcher, ChecksOnlyWhileWorkIsOpenAndNeverSpins) {
  std::atomic<int> checks{0};
  auto options = quietOptions();
  options.checkInterval = 50ms;
  options.check = [&] {
    ++checks;
    return Status::Ok();
  };
  CompletionWatcher w(options);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(checks.load(), 0) << "the watcher woke up with nothing to watch";
  Record rec;
  w.then(w.open(), rec.callback(1));
  ASSERT_TRUE(eventually([&] { return checks.load() >= 2; }));
  const auto start = Clock::now();
  const int before = checks.load();
  std::this_thread::sleep_for(250ms);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // At most one check per interval (plus slack for a late wake-up): a
  // polling loop would make thousands.
  EXPECT_LE(checks.load() - before, static_cast<int>(seconds / 0.05) + 2);
  w.signal();
  ASSERT_TRUE(eventually([&] { return rec.size() == 1; }));
}

// A synchronous caller's small ops: each fence opened, signalled and
// settled before the next one is opened. The watcher keeps to its check
// schedule after a fence settles, so the next then() finds it waiting with
// a deadline and needs no wake-up: one wake-up per op (its signal), where
// a watcher that slept without a deadline between them took two.
TEST(CompletionWatcher, FencesOneAfterAnotherCostOneWakeUpEach) {
  auto options = quietOptions();
  options.checkInterval = std::chrono::minutes(10);  // no periodic wake-ups
  CompletionWatcher w(options);
  Record rec;
  w.then(w.open(), rec.callback(0));
  w.signal();
  ASSERT_TRUE(eventually([&] { return rec.size() == 1; }));
  const uint64_t before = w.wakeups();
  constexpr int kOps = 20;
  for (int i = 1; i <= kOps; ++i) {
    w.then(w.open(), rec.callback(i));
    // The device's work takes a moment: time for the watcher thread to
    // run if then() woke it (back-to-back notifications would merge).
    std::this_thread::sleep_for(2ms);
    w.signal();
    ASSERT_TRUE(eventually([&] { return rec.size() == static_cast<size_t>(i) + 1; }));
  }
  EXPECT_LE(w.wakeups() - before, static_cast<uint64_t>(kOps) + 3)
      << "then() woke the watcher between fences that followed one another";
  w.drain();
}

// reach(): how far the device got, from a host function placed after
// several fences or from a waiter that saw a done event. A report that
// asked the health check's questions itself (checked) spares the watcher
// its check; an unchecked one does not.
TEST(CompletionWatcher, ReachSettlesEveryFenceUpToItAndACheckedOneSkipsTheCheck) {
  auto options = quietOptions();
  options.checkInterval = std::chrono::minutes(10);  // checks only at settling
  std::atomic<int> checks{0};
  options.check = [&checks] {
    ++checks;
    return Status::Ok();
  };
  CompletionWatcher w(options);
  Record rec;
  for (int i = 0; i < 3; ++i) w.then(w.open(), rec.callback(i));
  w.reach(2, /*checked=*/true);  // the first two, checked by the reporter
  ASSERT_TRUE(eventually([&] { return rec.size() == 2; }));
  EXPECT_EQ(checks.load(), 0) << "a checked report was checked again";
  EXPECT_EQ(w.reached(), 2u);
  w.reach(1);  // behind what is known: changes nothing
  w.reach(3);  // a host function's: unchecked
  ASSERT_TRUE(eventually([&] { return rec.size() == 3; }));
  EXPECT_EQ(checks.load(), 1);
  for (const auto& [tag, status] : rec.calls) EXPECT_TRUE(status.ok()) << tag;
  w.drain();
}

// then() right after open() (every response) wakes the watcher only when
// it has something to do: to start its health checks when nothing was
// open, or to run a callback whose fence was reached already.
TEST(CompletionWatcher, ThenWakesTheWatcherOnlyWhenItHasSomethingToDo) {
  auto options = quietOptions();
  options.checkInterval = std::chrono::minutes(10);  // no periodic wake-ups
  CompletionWatcher w(options);
  Record rec;
  // Nothing was open: this wakes the watcher (or it sees the fence as it
  // starts); either way it then sleeps until a signal or its next check.
  w.then(w.open(), rec.callback(0));
  std::this_thread::sleep_for(50ms);
  const uint64_t before = w.wakeups();
  for (int i = 1; i <= 20; ++i) {
    w.then(w.open(), rec.callback(i));
    // Absence of a wake-up: time for the watcher thread to run if woken
    // (back-to-back notifications would merge into one).
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_LE(w.wakeups() - before, 2u) << "then() woke a watcher that had nothing to do";
  EXPECT_EQ(rec.size(), 0u);
  // A fence reached before its then(): that then() must wake the watcher.
  const uint64_t late = w.open();
  for (int i = 0; i <= 21; ++i) w.signal();
  ASSERT_TRUE(eventually([&] { return rec.size() == 21; }));
  w.then(late, rec.callback(21));
  ASSERT_TRUE(eventually([&] { return rec.size() == 22; }));
  w.drain();
}

TEST(CompletionWatcher, FailFromOutsideEndsEverythingOpen) {
  std::atomic<int> aborted{0};
  auto options = quietOptions();
  options.onFailure = [&](const Status&) { ++aborted; };
  Record rec;
  CompletionWatcher w(options);
  w.then(w.open(), rec.callback(1));
  w.fail(Status{ErrorCode::kPeerFailure, "rank 1: killed"});
  ASSERT_TRUE(eventually([&] { return rec.size() == 1; }));
  EXPECT_EQ(rec.calls[0].second.message, "rank 1: killed");
  EXPECT_EQ(aborted.load(), 1);
}

TEST(CompletionWatcher, DrainWaitsUntilTheDeviceGotThereAndTheCallbacksRan) {
  Record rec;
  CompletionWatcher w(quietOptions());
  w.then(w.open(), rec.callback(1));
  w.then(w.open(), rec.callback(2));
  std::promise<void> draining;
  std::thread device([&] {
    draining.get_future().wait();
    w.signal();
    w.signal();
  });
  auto drained = std::async(std::launch::async, [&] {
    draining.set_value();
    w.drain();
    return rec.size();
  });
  ASSERT_EQ(drained.wait_for(kLimit), std::future_status::ready);
  EXPECT_EQ(drained.get(), 2u);
  device.join();
}

TEST(CompletionWatcher, DestroyingItSettlesWhatNeverRanWithShutdown) {
  Record rec;
  {
    CompletionWatcher w(quietOptions());
    w.then(w.open(), rec.callback(1));
    w.signal();
    w.then(w.open(), rec.callback(2));
  }
  ASSERT_EQ(rec.size(), 2u);
  EXPECT_TRUE(rec.calls[0].second.ok());
  EXPECT_EQ(rec.calls[1].second.code, ErrorCode::kShutdown);
}

TEST(CompletionWatcher, ThenOnAFenceThatIsNotOpenIsAnError) {
  CompletionWatcher w(quietOptions());
  EXPECT_THROW(w.then(7, [](const Status&, Clock::time_point) {}), Internal);
  const uint64_t f = w.open();
  w.then(f, [](const Status&, Clock::time_point) {});
  EXPECT_THROW(w.then(f, [](const Status&, Clock::time_point) {}), Internal);
  w.signal();
  w.drain();
}

// ---- two-stage handles (what the GPU path gives the caller) ---------------

TEST(TwoStageHandle, EnqueuedHandsOutTheDoneEventBeforeTheWorkIsDone) {
  auto state = std::make_shared<HandleState>();
  Handle h(state);
  int token = 0;  // stands for the cudaEvent_t
  auto event = std::shared_ptr<void>(&token, [](void*) {});
  EXPECT_FALSE(h.enqueued());
  std::thread loop([&] {
    state->markEnqueued(event);
    state->wake();
  });
  EXPECT_EQ(h.waitEnqueued(), &token);
  loop.join();
  EXPECT_TRUE(h.enqueued());
  EXPECT_FALSE(h.poll()) << "enqueued is not done";
  std::thread watcher([&] {
    state->finish(Status::Ok());
    state->wake();
  });
  ASSERT_TRUE(h.waitFor(kLimit));
  watcher.join();
  // Done: nothing left to wait for on any stream.
  EXPECT_EQ(h.waitEnqueued(), nullptr);
  EXPECT_NO_THROW(h.wait());
}

TEST(TwoStageHandle, AFailureBeforeTheWorkWasEnqueuedThrowsThere) {
  auto state = std::make_shared<HandleState>();
  Handle h(state);
  state->finish(Status{ErrorCode::kMismatch, "'g': rank 1 sent float32[3], rank 0 float32[4]"});
  state->wake();
  EXPECT_TRUE(h.enqueued());
  EXPECT_THROW(h.waitEnqueued(), Mismatch);
}

}  // namespace
}  // namespace kolo
