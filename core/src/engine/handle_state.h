// Shared completion state behind kolo::Handle.
#pragma once

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

  // Called once, by the background thread, then wake(). Results
  // (outputShape...) must be set before. Apart so that a batch of handles
  // is marked done before any waiter wakes: a caller waiting on them one by
  // one then sleeps once, not once per handle.
  void finish(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
  }
  void wake() { cv.notify_all(); }
  // Stage one of a CUDA operation (background thread), then wake().
  void markEnqueued(std::shared_ptr<void> event) {
    std::lock_guard<std::mutex> lock(mu);
    doneEvent = std::move(event);
    enqueued = true;
  }
};

}  // namespace kolo
