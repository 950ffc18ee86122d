// Shared completion state behind kolo::Handle.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "kolo/engine.h"

namespace kolo {

struct HandleState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // CUDA operations: their GPU work is enqueued on the engine's comm stream
  // (the first of two stages; done follows once the GPU finished), and the
  // event after that work, which consumers' streams wait on.
  bool enqueued = false;
  std::shared_ptr<void> doneEvent;
  Status status;
  std::vector<int64_t> outputShape;
  std::vector<int64_t> receivedSplits;
  int joinResult = -1;
  int processSetId = -1;  // process set change: the set added

  // done and done || enqueued, readable without mu: a waiter polls them
  // while it spins. Each is set under mu together with its field, after
  // the results, so whoever reads it true (acquire) then sees the results.
  std::atomic<bool> doneFlag{false};
  std::atomic<bool> stageFlag{false};
  // Waiters blocked on cv. Changed under mu only; read without it by wake()
  // (see there).
  std::atomic<int> sleepers{0};
  // How long a waiter polls the flags before it blocks on cv (the engine's
  // spin time, Config::spinTime; set before the handle is shared).
  std::chrono::nanoseconds spin{0};

  // Called once, by the background thread, then wake(). Results
  // (outputShape...) must be set before. Apart so that a batch of handles
  // is marked done before any waiter wakes: a caller waiting on them one by
  // one then sleeps once, not once per handle.
  void finish(Status s) {
    std::lock_guard<std::mutex> lock(mu);
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
  // Stage one of a CUDA operation (background thread), then wake().
  void markEnqueued(std::shared_ptr<void> event) {
    std::lock_guard<std::mutex> lock(mu);
    doneEvent = std::move(event);
    enqueued = true;
    stageFlag.store(true, std::memory_order_release);
  }
};

}  // namespace kolo
