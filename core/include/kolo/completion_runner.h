/// \file
/// kolo::CompletionRunner: runs completion work (a framework's future
/// callbacks) on threads of its own, off the engine's thread, for adapters
/// whose callbacks may block on other operations (DDP's communication hooks
/// wait on further futures; they must never run on the engine's thread).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

namespace kolo {

/// Runs each posted task on one of its threads, starting another whenever
/// every thread is busy, so a task may wait for a task posted after it.
/// Idle threads beyond the first end after a few seconds. A task that
/// throws is ignored (its own result, a future's error, says why).
///
/// Threading: post() from any thread. The destructor waits for the tasks
/// posted before it and for every thread to end; it must not run on one
/// of the runner's threads.
class CompletionRunner {
 public:
  CompletionRunner() = default;
  ~CompletionRunner();
  /// Not copyable (nor movable).
  CompletionRunner(const CompletionRunner&) = delete;
  /// Not copy-assignable.
  CompletionRunner& operator=(const CompletionRunner&) = delete;

  /// Queues task; it runs on a runner thread soon, never on the caller's.
  void post(std::function<void()> task);
  /// Threads running now (tests).
  int threads() const;

 private:
  void run();
  mutable std::mutex mu_;
  std::condition_variable cv_;     // work, or stop
  std::condition_variable ended_;  // a thread ended (the destructor waits)
  std::vector<std::function<void()>> tasks_;
  int threads_ = 0;
  int idle_ = 0;
  bool stop_ = false;
};

}  // namespace kolo
