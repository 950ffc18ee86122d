// Shared completion state behind kolo::Handle.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/cuda/gpu_ops.h"
#include "kolo/engine.h"

namespace kolo {

struct HandleState;

// Runs an engine's negotiation cycles on the thread of a caller waiting for
// one of its operations (Engine::Impl implements it).
class CallerCycles {
 public:
  virtual ~CallerCycles() = default;
  // Called with the gate's mu held (CycleGate): runs cycles until s is done,
  // or returns early where the caller may not run them (see the engine);
  // stamps CycleGate::lastDriveNs where it ran any.
  virtual void driveUntilDone(HandleState& s) = 0;
};

// Who runs an engine's cycles: its background loop thread, or a caller
// waiting in Handle::wait() while the loop thread is not in a cycle (as
// MPI's caller drives its own progress). Either holds mu for the cycle, so
// one thread at a time touches the loop's state. Shared with the handles,
// which may outlive the engine.
struct CycleGate {
  std::mutex mu;
  // Guarded by mu; nullptr once the engine's loop ended for good.
  CallerCycles* engine = nullptr;
  // When a caller last ran the cycles (steady clock, ns; at the start and
  // end of its drive).
  std::atomic<int64_t> lastDriveNs{0};
  // When a caller last returned from Handle::wait() (ns; not once the
  // engine is loopOnly).
  std::atomic<int64_t> lastWaitNs{0};
  // Set at this engine's first CUDA operation, and never cleared: only
  // the loop thread runs its cycles from then on (the engine's
  // callerMayDrive(), which also says no while a set is joined).
  std::atomic<bool> loopOnly{false};

  // Within kDriveWindow of a caller's drive or wait, the next operation is
  // most likely another synchronous one (a loop of them, or a sequence):
  // the loop thread leaves the op to that caller until the window ends,
  // since the caller runs the cycle itself, and takes it over after that.
  // The wait counts, not only the drive: a loop thread that completed the
  // op before its caller waited (or while it slept) would otherwise win
  // the next op too, and every one after it. Later pushes (a backward
  // pass's, milliseconds after the last wait) are the loop thread's.
  static constexpr std::chrono::microseconds kDriveWindow{100};
  // For this long after a caller's drive, the loop thread sleeps until
  // woken, looking once per cycle time (engine_threads.cc), and a push
  // within kDriveWindow does not wake it (quietPush): its caller drains it.
  static constexpr std::chrono::seconds kCallersLately{1};
  // How long a waiting caller that found the gate held looks again before
  // it sleeps (Handle::wait): the holder's iteration may be ending.
  static constexpr std::chrono::microseconds kGateRetry{30};
  static int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // A caller ran the cycles within the last `window` before now (ns).
  bool droveWithin(std::chrono::nanoseconds window, int64_t now = nowNs()) const {
    const int64_t last = lastDriveNs.load(std::memory_order_relaxed);
    return last != 0 && now - last < window.count();
  }
  // The end of the window after the last drive or wait (ns; 0: none).
  int64_t driveWindowEndNs() const {
    const int64_t last = std::max(lastDriveNs.load(std::memory_order_relaxed),
                                  lastWaitNs.load(std::memory_order_relaxed));
    return last == 0 ? 0 : last + std::chrono::nanoseconds(kDriveWindow).count();
  }
  bool callersDriving(int64_t now = nowNs()) const { return now < driveWindowEndNs(); }
  // A push now leaves the loop thread asleep (where callers may drive).
  // One clock read: it is on every push.
  bool quietPush() const {
    const int64_t now = nowNs();
    return callersDriving(now) && droveWithin(kCallersLately, now);
  }
  std::chrono::steady_clock::time_point driveWindowEnd() const {
    return std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::nanoseconds(driveWindowEndNs())));
  }
};

// The gate whose cycles this thread runs now (nullptr: none): a completion
// callback waiting on a handle does not try to take the gate it holds.
inline thread_local const CycleGate* tCycleGateHeld = nullptr;

struct HandleState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // CUDA operations: their GPU work is enqueued on the engine's comm stream
  // (the first of two stages; done follows once the GPU finished), and the
  // event after that work, which consumers' streams wait on.
  bool enqueued = false;
  std::shared_ptr<void> doneEvent;
  // Set with doneEvent, before stageFlag, and never changed after: read
  // without mu by whoever saw stageFlag set. Where doneEvent lies on its
  // comm stream (GpuFence::stream, sequence; Handle::lastDoneEvents) and
  // what tells a waiter that the GPU finished the work (nullptr for
  // handles made by hand in tests: they complete only through finish()).
  int doneDevice = -1;
  uint64_t doneStream = 0;
  uint64_t doneSequence = 0;
  uint64_t doneFence = 0;  // GpuFence::id, which the probe reports
  std::shared_ptr<comm::cuda::FenceProbe> probe;
  Status status;
  std::vector<int64_t> outputShape;
  std::vector<int64_t> receivedSplits;
  int joinResult = -1;
  int processSetId = -1;  // process set change: the set added
  int source = -1;        // Engine::recv: the sending rank

  // done and done || enqueued, readable without mu: a waiter polls them
  // while it spins. Each is set under mu together with its field, after
  // the results, so whoever reads it true (acquire) then sees the results.
  std::atomic<bool> doneFlag{false};
  std::atomic<bool> stageFlag{false};
  // Waiters blocked on cv, and those of them that wait for stage one too
  // (waitEnqueued; a waiter of done that polls the done event once the
  // work is enqueued). Changed under mu only; read without it by wake()
  // and wakeStage() (see there).
  std::atomic<int> sleepers{0};
  std::atomic<int> stageSleepers{0};
  // How long a waiter polls the flags before it blocks on cv (the engine's
  // spin time, Config::spinTime; set before the handle is shared).
  std::chrono::nanoseconds spin{0};
  // The engine's cycle gate (set before the handle is shared; nullptr for
  // handles made by hand): wait() may run the cycles itself.
  std::shared_ptr<CycleGate> gate;

  // Called by the background (or completion) thread, then wake(). Results
  // (outputShape...) must be set before. Apart so that a batch of handles
  // is marked done before any waiter wakes: a caller waiting on them one by
  // one then sleeps once, not once per handle. The first call decides: a
  // waiter that saw the GPU finish (reachedDone) may have finished the
  // handle with Ok before the completion thread's call, which then changes
  // nothing.
  void finish(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    status = std::move(s);
    done = true;
    doneFlag.store(true, std::memory_order_release);
    stageFlag.store(true, std::memory_order_release);
  }
  // Wakes the waiters blocked on cv, and makes no system call when there are
  // none (a waiter that spun and saw the flag, or nobody waiting yet). A
  // waiter counts itself in sleepers under mu before it checks the state
  // and blocks; finish and markEnqueued change the state under mu before
  // wake reads sleepers, so a waiter either sees the change or is counted.
  void wake() {
    if (sleepers.load(std::memory_order_relaxed) > 0) cv.notify_all();
  }
  // wake() after markEnqueued: only waiters that wait for stage one need
  // it (a waiter of done that will not poll the done event sleeps on).
  void wakeStage() {
    if (stageSleepers.load(std::memory_order_relaxed) > 0) cv.notify_all();
  }
  // Stage one of a CUDA operation (background thread), then wake(). fence:
  // the response's (its done event, place and probe).
  void markEnqueued(const comm::cuda::GpuFence& fence) {
    std::lock_guard<std::mutex> lock(mu);
    doneEvent = fence.doneEvent;
    doneDevice = fence.device;
    doneStream = fence.stream;
    doneSequence = fence.sequence;
    doneFence = fence.id;
    probe = fence.probe;
    enqueued = true;
    stageFlag.store(true, std::memory_order_release);
  }
  // Stage one with only a done event (tests of the handle alone).
  void markEnqueued(std::shared_ptr<void> event) {
    comm::cuda::GpuFence fence;
    fence.doneEvent = std::move(event);
    markEnqueued(fence);
  }
  // The shortcut of a waiter of a CUDA operation past stage one: once the
  // probe says the GPU finished the work well (the device reached the done
  // event; the outputs are valid), it finishes the handle with Ok itself,
  // without waiting for the hand-offs host function -> completion thread
  // -> finish(). Returns whether the handle is done (then read status: a
  // failure the completion thread reported first stands). One probe
  // (a device event query) per call. Any thread.
  bool reachedDone() {
    if (doneFlag.load(std::memory_order_acquire)) return true;
    // stageFlag (acquire) makes probe and doneEvent readable without mu.
    if (!stageFlag.load(std::memory_order_acquire) || !probe) return false;
    if (!probe->succeeded(doneEvent.get(), doneFence)) return false;
    finish(Status::Ok());
    wake();  // other waiters of this handle, asleep
    return true;
  }
};

}  // namespace kolo
