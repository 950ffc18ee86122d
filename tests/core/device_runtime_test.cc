// device::host::HostRuntime keeps CUDA's ordering semantics (device/runtime.h):
// the GPU orchestration's tests (gpu_orchestration_test.cc) rely on them.
// Every wait is bounded by an event; nothing relies on a tight sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "comm/host/collectives.h"
#include "device/host/host_runtime.h"

namespace kolo::device::host {
namespace {

using namespace std::chrono_literals;
using Stage = HostRuntime::Stage;

struct Log {
  std::mutex mu;
  std::vector<std::string> entries;
  std::vector<std::thread::id> threads;
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    entries.push_back(what);
    threads.push_back(std::this_thread::get_id());
  }
};

struct Mark {
  Log* log;
  std::string what;
};

void mark(void* arg) {
  auto* m = static_cast<Mark*>(arg);
  m->log->add(m->what);
}

TEST(HostRuntime, StreamRunsItsWorkInOrderOnItsOwnThread) {
  HostRuntime rt(1);
  Stream s = rt.createStream(0);
  auto* a = static_cast<int*>(rt.allocDevice(0, 4 * sizeof(int)));
  const int values[4] = {1, 2, 3, 4};
  Log log;
  Mark first{&log, "first"}, second{&log, "second"};
  rt.hostFunc(s, &mark, &first);
  rt.copy(a, values, sizeof(values), CopyKind::kHostToDevice, s);
  rt.pack({device::CopyDesc{a, a, 4}}, DataType::kInt32,
          device::makeTransform(DataType::kInt32, 3.0), s);
  rt.hostFunc(s, &mark, &second);
  rt.synchronize(s);
  EXPECT_EQ(log.entries, (std::vector<std::string>{"first", "second"}));
  EXPECT_NE(log.threads[0], std::this_thread::get_id());
  EXPECT_EQ(a[0], 3);
  EXPECT_EQ(a[3], 12);
  EXPECT_EQ(rt.deviceOf(a + 2), 0);
  EXPECT_EQ(rt.deviceOf(values), -1);
  rt.freeDevice(a);
  rt.destroyStream(s);
}

// As CUDA: a host function runs on a callback thread (not the stream's),
// and the stream's later work waits until it returned. The GPU path's
// cost model relies on it (GpuOps::flushSignals).
TEST(HostRuntime, AHostFunctionRunsOnACallbackThreadAndHoldsItsStream) {
  HostRuntime rt(1);
  Stream s = rt.createStream(0);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<std::thread::id> streamThread, callbackThread;
  std::promise<void> entered;
  rt.launch(s, Stage::kCopy, [&] { streamThread.set_value(std::this_thread::get_id()); });
  struct Held {
    std::promise<std::thread::id>* id;
    std::promise<void>* entered;
    std::shared_future<void> released;
  } held{&callbackThread, &entered, released};
  rt.hostFunc(s, [](void* arg) {
    auto* h = static_cast<Held*>(arg);
    h->id->set_value(std::this_thread::get_id());
    h->entered->set_value();
    (void)h->released.wait_for(30s);  // bounded: a stuck test fails, never hangs
  }, &held);
  std::atomic<bool> after{false};
  rt.launch(s, Stage::kCopy, [&] { after.store(true); });
  ASSERT_EQ(entered.get_future().wait_for(30s), std::future_status::ready);
  const std::thread::id onStream = streamThread.get_future().get();
  const std::thread::id onCallback = callbackThread.get_future().get();
  EXPECT_NE(onCallback, onStream);
  EXPECT_NE(onCallback, std::this_thread::get_id());
  // Held in the host function: the work behind it has not run, and the
  // stream is not idle.
  EXPECT_FALSE(rt.settleFor(s, 50ms));
  EXPECT_FALSE(after.load());
  release.set_value();
  rt.synchronize(s);
  EXPECT_TRUE(after.load());
  rt.destroyStream(s);
}

TEST(HostRuntime, CrossStreamWaitOrdersTheWaiterAfterTheRecordedWork) {
  HostRuntime rt(2);
  Stream producer = rt.createStream(0);
  Stream consumer = rt.createStream(1);
  Event e = rt.createEvent(0, false);
  EXPECT_TRUE(rt.reached(e));  // never recorded
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Log log;
  rt.launch(producer, Stage::kCopy, [&, released] {
    released.wait();
    log.add("producer");
  });
  rt.record(e, producer);
  rt.wait(consumer, e);
  Mark after{&log, "consumer"};
  rt.hostFunc(consumer, &mark, &after);
  // A later record does not move the wait (cudaStreamWaitEvent semantics).
  EXPECT_FALSE(rt.reached(e));
  release.set_value();
  rt.synchronize(consumer);
  EXPECT_TRUE(rt.reached(e));
  EXPECT_EQ(log.entries, (std::vector<std::string>{"producer", "consumer"}));
  rt.destroyEvent(e);
}

TEST(HostRuntime, AFaultIsStickyAndNothingBehindItRuns) {
  HostRuntime rt(2);
  Stream s = rt.createStream(0);
  Stream other = rt.createStream(0);
  Stream healthy = rt.createStream(1);
  auto* a = static_cast<float*>(rt.allocDevice(0, 16));
  rt.faultAt(0, Stage::kPack, 2, "illegal address in the unpack");
  Log log;
  Mark before{&log, "before"}, after{&log, "after"};
  rt.pack({device::CopyDesc{nullptr, a, 4}}, DataType::kFloat32, {}, s);  // 1st: runs
  rt.hostFunc(s, &mark, &before);
  rt.pack({device::CopyDesc{a, a, 4}}, DataType::kFloat32, {}, s);  // 2nd: faults
  rt.hostFunc(s, &mark, &after);
  try {
    rt.synchronize(s);
    FAIL() << "a faulted stream synchronized without an error";
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("illegal address in the unpack"), std::string::npos);
  }
  EXPECT_EQ(log.entries, std::vector<std::string>{"before"});  // "after" never ran
  EXPECT_FALSE(rt.streamError(other).ok());                    // every stream of the device
  EXPECT_THROW(rt.synchronize(other), Internal);
  EXPECT_TRUE(rt.streamError(healthy).ok());  // other devices are fine
  rt.synchronize(healthy);
}

TEST(HostRuntime, EventsRecordedUnderCaptureAreCaptured) {
  HostRuntime rt(1);
  Stream user = rt.createStream(0);
  Event e = rt.createEvent(0, false);
  rt.record(e, user);
  EXPECT_FALSE(rt.captured(e));
  rt.beginCapture(user);
  rt.record(e, user);
  EXPECT_TRUE(rt.captured(e));
  rt.endCapture(user);
  rt.synchronize(user);
  rt.destroyEvent(e);
}

// CUDA's capture modes: while a thread captures in global mode, a
// potentially unsafe call from another thread in global mode fails and
// invalidates the capture; a pinned thread (kolo's) is in thread-local mode
// and breaks nothing, and the any-thread queries switch an unpinned caller
// for the call.
TEST(HostRuntime, AGlobalCaptureIsBrokenOnlyByGlobalModeThreads) {
  HostRuntime rt(1);
  Stream user = rt.createStream(0);
  Stream other = rt.createStream(0);
  Event e = rt.createEvent(0, false);
  rt.record(e, other);
  auto onThread = [](auto fn) { std::thread t(fn); t.join(); };

  rt.beginCapture(user);
  onThread([&] { EXPECT_THROW(rt.synchronize(other), Internal); });
  std::string why;
  EXPECT_FALSE(rt.endCapture(user, &why));
  EXPECT_EQ(why, "cudaStreamSynchronize");

  rt.beginCapture(user);
  onThread([&] {
    rt.pinThread(0);  // kolo's threads: thread-local mode from here on
    rt.synchronize(other);
    void* p = rt.allocDevice(0, 16);
    rt.freeDevice(p);
  });
  onThread([&] {  // unpinned: the any-thread queries are safe
    EXPECT_TRUE(rt.reached(e));
    EXPECT_TRUE(rt.streamError(other).ok());
    EXPECT_TRUE(rt.settleFor(other, std::chrono::seconds(5)));
  });
  EXPECT_TRUE(rt.endCapture(user, &why)) << why;

  // A thread-local capture is broken only by its own thread.
  rt.beginCapture(user, HostRuntime::CaptureMode::kThreadLocal);
  onThread([&] { rt.synchronize(other); });
  EXPECT_TRUE(rt.endCapture(user, &why)) << why;
  rt.beginCapture(user, HostRuntime::CaptureMode::kThreadLocal);
  EXPECT_THROW(rt.synchronize(other), Internal);
  EXPECT_FALSE(rt.endCapture(user));
  // A relaxed thread breaks nothing.
  rt.beginCapture(user);
  onThread([&] {
    (void)rt.exchangeCaptureMode(HostRuntime::CaptureMode::kRelaxed);
    rt.synchronize(other);
  });
  EXPECT_TRUE(rt.endCapture(user, &why)) << why;

  rt.destroyEvent(e);
  rt.destroyStream(other);
  rt.destroyStream(user);
}

TEST(HostRuntime, AThreadIsPinnedOnceAndNeverSwitches) {
  HostRuntime rt(2);
  EXPECT_EQ(rt.currentDevice(), -1);
  rt.pinThread(1);
  rt.pinThread(1);
  EXPECT_EQ(rt.currentDevice(), 1);
  EXPECT_THROW(rt.pinThread(0), Internal);
  std::thread([&] { rt.pinThread(0); }).join();
  EXPECT_EQ(rt.threadsPinnedTo(0), 1);
  EXPECT_EQ(rt.threadsPinnedTo(1), 1);
  try {
    rt.createStream(5);
    FAIL() << "a device that does not exist";
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("device 5 does not exist"), std::string::npos);
  }
}

TEST(HostClique, AbortEndsAMemberWaitingForItsPeers) {
  Clique clique(2);
  std::vector<char> buf(4);
  auto waiting = std::async(std::launch::async, [&] {
    return clique.run(0, {buf.data(), buf.data()}, 4,
                      [](const std::vector<Clique::Part>&, std::vector<char>&) {}, 60s);
  });
  clique.abort("rank 1 aborted: its device faulted");
  ASSERT_EQ(waiting.wait_for(30s), std::future_status::ready);
  const Status s = waiting.get();
  EXPECT_EQ(s.code, ErrorCode::kPeerFailure);
  EXPECT_NE(s.message.find("its device faulted"), std::string::npos);
}

}  // namespace
}  // namespace kolo::device::host
