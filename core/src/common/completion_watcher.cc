#include "common/completion_watcher.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/thread_name.h"

namespace kolo {

CompletionWatcher::CompletionWatcher(Options options) : options_(std::move(options)) {
  thread_ = std::thread([this] {
    nameThisThread("kolo-watch");
    runWatcher();
  });
}

CompletionWatcher::~CompletionWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t CompletionWatcher::open() {
  std::lock_guard<std::mutex> lock(mu_);
  fences_.push_back(Fence{Clock::now(), {}, {}});
  return base_ + fences_.size();
}

void CompletionWatcher::then(uint64_t fence, Callback callback) {
  bool wakeWatcher = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (fence > 0 && fence <= base_) {
      // Settled without a callback (after a failure, or at shutdown): the
      // outcome is known, run it here.
      const bool reached = fence <= signalled_;
      const Status why = reached ? Status::Ok()
                         : failure_.ok()
                             ? Status{ErrorCode::kShutdown,
                                      options_.what + ": the engine stopped before this work "
                                                      "completed"}
                             : failure_;
      lock.unlock();
      callback(why, Clock::time_point{});
      return;
    }
    KOLO_ENFORCE(fence > base_ && fence <= base_ + fences_.size() && !at(fence).callback,
                 "completion watcher: fence " + std::to_string(fence) +
                     " is not open or has a callback already");
    at(fence).callback = std::move(callback);
    // See the header: otherwise the watcher has nothing to do until a
    // signal() or its next check, which wake it anyway.
    wakeWatcher = fence <= signalled_ || idle_ || !failure_.ok() || stopping_;
  }
  if (wakeWatcher) cv_.notify_all();
}

void CompletionWatcher::signal() {
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    reachLocked(signalled_ + 1, false, now);
  }
  cv_.notify_all();
}

void CompletionWatcher::reach(uint64_t fence, bool checked) {
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reachLocked(fence, checked, now)) return;
  }
  cv_.notify_all();
}

bool CompletionWatcher::reachLocked(uint64_t fence, bool checked, Clock::time_point now) {
  // After a failure the device's work counts as failed, whatever ends.
  if (!failure_.ok() || stopping_) return false;
  const uint64_t last = std::min<uint64_t>(fence, base_ + fences_.size());
  if (checked) checked_ = std::max(checked_, last);
  if (last <= signalled_) return false;
  while (signalled_ < last) {
    ++signalled_;
    if (signalled_ > base_) at(signalled_).signalled = now;
  }
  return true;
}

void CompletionWatcher::fail(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = status;
  }
  cv_.notify_all();
}

void CompletionWatcher::drain() { (void)drainFor(std::chrono::milliseconds::max()); }

bool CompletionWatcher::drainFor(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t last = base_ + fences_.size();
  const auto until = limit == std::chrono::milliseconds::max() || limit.count() > 1000000000
                         ? Clock::time_point::max()
                         : Clock::now() + limit;
  auto settled = [&] {
    // Every fence up to last settled: reached or failed, and its callback
    // (if any was attached) ran.
    const bool reached = signalled_ >= last || !failure_.ok();
    bool callbacksRan = !running_;
    for (uint64_t n = base_ + 1; n <= last && callbacksRan; ++n) {
      if (at(n).callback) callbacksRan = false;
    }
    return reached && callbacksRan;
  };
  if (until == Clock::time_point::max()) {
    drained_.wait(lock, settled);
    return true;
  }
  return drained_.wait_until(lock, until, settled);
}

uint64_t CompletionWatcher::wakeups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wakeups_;
}

size_t CompletionWatcher::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.ok()) return 0;
  return static_cast<size_t>(base_ + fences_.size() - signalled_);
}

uint64_t CompletionWatcher::reached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return signalled_;
}

Status CompletionWatcher::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void CompletionWatcher::runWatcher() {
  bool failureHandled = false;
  auto nextCheck = Clock::now() + options_.checkInterval;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Settle the front fences whose outcome is known and whose callback is
    // attached, in order (a fence whose callback is not attached yet holds
    // back the ones after it: then() comes right after open()).
    std::vector<std::pair<Callback, Clock::time_point>> ok;
    std::vector<Callback> failed;
    while (!fences_.empty()) {
      Fence& f = fences_.front();
      const bool reached = base_ + 1 <= signalled_;
      if (!reached && failure_.ok() && !stopping_) break;  // still on the device
      // Its then() is on its way, unless the work failed: then the fence
      // settles without one (then() runs a late callback itself).
      if (!f.callback && !stopping_ && failure_.ok()) break;
      if (f.callback) {
        if (reached) {
          ok.emplace_back(std::move(f.callback), f.signalled);
        } else {
          failed.push_back(std::move(f.callback));
        }
      }
      fences_.pop_front();
      ++base_;
    }
    Status failure = failure_;
    bool failNow = !failure.ok() && !failureHandled;
    // Every fence settled here was checked by whoever reported it.
    const bool checkedAlready = base_ <= checked_;
    if (!ok.empty() || !failed.empty() || failNow) {
      running_ = true;
      lock.unlock();
      if (!ok.empty() && options_.check && !checkedAlready) {
        // A signal is not success by itself: after a collective was aborted
        // (or a kernel faulted) the work behind it still reaches its
        // signal. Ask before calling the fences done.
        const Status problem = options_.check();
        if (!problem.ok()) {
          lock.lock();
          if (failure_.ok()) failure_ = problem;
          failure = failure_;
          failNow = !failureHandled;
          lock.unlock();
          for (auto& entry : ok) failed.push_back(std::move(entry.first));
          ok.clear();
        }
      }
      if (failNow && options_.onFailure) options_.onFailure(failure);
      for (auto& [callback, at] : ok) callback(Status::Ok(), at);
      const Status why = failure.ok() ? Status{ErrorCode::kShutdown,
                                               options_.what +
                                                   ": the engine stopped before this work "
                                                   "completed"}
                                      : failure;
      for (auto& callback : failed) callback(why, Clock::time_point{});
      lock.lock();
      running_ = false;
      if (failNow) failureHandled = true;
      drained_.notify_all();
      continue;  // more may have settled meanwhile
    }
    drained_.notify_all();
    if (stopping_ && fences_.empty()) return;
    if (stopping_) continue;  // settles the rest as failed on the next pass
    const bool open = failure_.ok() && signalled_ < base_ + fences_.size();
    if (!open && failure_.ok() && Clock::now() < nextCheck) {
      // Nothing on the device. Stay on the check schedule until the next
      // check is due before sleeping without a deadline: the next fence
      // of a burst then needs no wake-up of its own (then()), only its
      // signal. An idle device costs one wake-up more, at that check.
      cv_.wait_until(lock, nextCheck);
      ++wakeups_;
      continue;
    }
    if (!open) {
      idle_ = true;
      cv_.wait(lock);
      idle_ = false;
      ++wakeups_;
      nextCheck = Clock::now() + options_.checkInterval;
      continue;
    }
    cv_.wait_until(lock, nextCheck);
    ++wakeups_;
    const auto now = Clock::now();
    if (now < nextCheck || !failure_.ok()) continue;
    nextCheck = now + options_.checkInterval;
    // The oldest fence not yet reached bounds the wait.
    const uint64_t oldest = signalled_ + 1;
    Status problem;
    if (oldest > base_ && oldest <= base_ + fences_.size() &&
        now - at(oldest).opened > options_.timeout) {
      problem = Status{ErrorCode::kTimeout,
                       options_.what + " did not complete within KOLO_TIMEOUT (" +
                           std::to_string(options_.timeout.count()) + " ms)"};
    } else if (options_.check) {
      lock.unlock();
      problem = options_.check();
      lock.lock();
    }
    if (!problem.ok() && failure_.ok()) failure_ = problem;
  }
}

}  // namespace kolo
