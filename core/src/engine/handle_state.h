// Shared completion state behind kolo::Handle.
#pragma once

#include <condition_variable>
#include <mutex>
#include <vector>

#include "kolo/engine.h"

namespace kolo {

struct HandleState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
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
};

}  // namespace kolo
