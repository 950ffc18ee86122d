// Hand-off between caller threads (enqueue) and the background loop.
//
// Names (per process set) are reserved from push until release: a second
// operation under a name still in flight in its set is refused at push. The loop sleeps in waitForWork
// until new work arrives, stop is requested, or the cycle deadline passes.
// Right after work it may poll instead (spinUntil), so a push that follows
// within microseconds costs neither side a system call: push notifies the
// condition variable only while the loop is blocked on it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "execution/pending.h"

namespace kolo {

class TensorQueue {
 public:
  // Any thread. Atomically queues all ops (a group) or none; throws
  // InvalidArgument when a name is in flight or repeated within ops, or the
  // stop status when the queue is closed. wakeLoop false: a blocked loop
  // is not woken (a caller will drain ops; the loop looks at its own pace).
  void push(std::vector<PendingOp> ops, bool wakeLoop = true);

  // The thread running the cycles. Moves everything queued so far to the
  // end of out. An empty out is swapped with the queue, so that a steady
  // stream of thousands of ops per step reallocates neither vector.
  void drainInto(std::vector<PendingOp>& out);

  // Any thread: whether ops are queued (not drained yet).
  bool hasWork() const;

  // Loop thread. Returns when work is queued, wake() was called or deadline
  // passed. Until spinUntil (when earlier than deadline) it polls without
  // blocking (engine/spin.h); after that, when the deadline is still
  // ahead, it calls beforeSleep (when set and nothing is queued yet) and
  // sleeps.
  void waitForWork(std::chrono::steady_clock::time_point deadline,
                   std::chrono::steady_clock::time_point spinUntil = {},
                   const std::function<void()>& beforeSleep = {});

  // Loop thread, while callers run the cycles: returns true when wake() or
  // a push with wakeLoop was called, false when deadline passed; a quiet
  // push does not wake it (a caller drains) unless anyPush.
  bool waitForWake(std::chrono::steady_clock::time_point deadline, bool anyPush = false);

  // Any thread: makes waitForWork and waitForWake return now.
  void wake();

  // Loop thread: the ops named names in processSet completed; the names
  // may be reused.
  void release(int processSet, const std::vector<const std::string*>& names);

  // Refuses further pushes with status (engine stopped or failed).
  void close(const Status& status);

  bool closed() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PendingOp> queue_;
  std::unordered_set<std::string> inFlight_;
  bool woken_ = false;
  bool sleeping_ = false;  // the loop is blocked on cv_ (push and wake notify)
  bool wakeOnly_ = false;  // the loop is blocked in waitForWake (wake notifies)
  bool anyPush_ = false;   // ... and quiet pushes notify too
  bool closed_ = false;
  // !queue_.empty() || woken_, readable without mu_ (the loop's spin).
  // Written under mu_.
  std::atomic<bool> ready_{false};
  Status closedStatus_;
};

}  // namespace kolo
