#include "engine/tensor_queue.h"

#include <algorithm>

#include "engine/spin.h"

namespace kolo {
namespace {

// Names are per process set: set 0's keys are the names themselves.
std::string inFlightKey(int processSet, const std::string& name) {
  if (processSet == 0) return name;
  return std::to_string(processSet) + '\0' + name;
}

}  // namespace

void TensorQueue::push(std::vector<PendingOp> ops, bool wakeLoop) {
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) closedStatus_.throwIfError();
    // Reserve every name, or none: a name in flight, or repeated within
    // ops, takes back the ones reserved before it.
    for (size_t i = 0; i < ops.size(); ++i) {
      const Request& q = ops[i].msg.request;
      if (!inFlight_.insert(inFlightKey(q.processSet, q.name)).second) {
        for (size_t j = 0; j < i; ++j) {
          inFlight_.erase(inFlightKey(ops[j].msg.request.processSet, ops[j].msg.request.name));
        }
        std::string where =
            q.processSet == 0 ? "" : " in process set " + std::to_string(q.processSet);
        throw InvalidArgument("duplicate name '" + q.name + "': an operation with this name is "
                              "still in flight" + where +
                              "; wait for it or give the new one another name");
      }
    }
    for (auto& op : ops) queue_.push_back(std::move(op));
    ready_.store(true, std::memory_order_release);
    if (wakeLoop || anyPush_) {
      notify = sleeping_ || wakeOnly_;
      woken_ = woken_ || wakeOnly_;  // waitForWake returns for it too
    }
  }
  if (notify) cv_.notify_one();
}

void TensorQueue::drainInto(std::vector<PendingOp>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (out.empty()) {
    out.swap(queue_);
  } else {
    for (auto& op : queue_) out.push_back(std::move(op));
    queue_.clear();
  }
  ready_.store(woken_, std::memory_order_relaxed);
}

bool TensorQueue::hasWork() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !queue_.empty();
}

bool TensorQueue::waitForWake(std::chrono::steady_clock::time_point deadline, bool anyPush) {
  std::unique_lock<std::mutex> lock(mu_);
  wakeOnly_ = true;
  anyPush_ = anyPush;
  const bool woken = cv_.wait_until(lock, deadline, [&] { return woken_; });
  wakeOnly_ = false;
  anyPush_ = false;
  woken_ = false;
  ready_.store(!queue_.empty(), std::memory_order_relaxed);
  return woken;
}

void TensorQueue::waitForWork(std::chrono::steady_clock::time_point deadline,
                              std::chrono::steady_clock::time_point spinUntil,
                              const std::function<void()>& beforeSleep) {
  if (spinUntil > std::chrono::steady_clock::now()) {
    detail::spinUntil(std::min(spinUntil, deadline),
                      [&] { return ready_.load(std::memory_order_acquire); });
  }
  // Only before a sleep: a spin that ran into the deadline goes straight
  // on to the next cycle, where the loop looks again (a GPU fence flushed
  // here would place a host function a spinning waiter had made needless).
  if (beforeSleep && !ready_.load(std::memory_order_acquire) &&
      std::chrono::steady_clock::now() < deadline) {
    beforeSleep();
  }
  std::unique_lock<std::mutex> lock(mu_);
  sleeping_ = true;
  cv_.wait_until(lock, deadline, [&] { return !queue_.empty() || woken_; });
  sleeping_ = false;
  woken_ = false;
  ready_.store(!queue_.empty(), std::memory_order_relaxed);
}

void TensorQueue::wake() {
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
    ready_.store(true, std::memory_order_release);
    notify = sleeping_ || wakeOnly_;
  }
  if (notify) cv_.notify_one();
}

void TensorQueue::release(int processSet, const std::vector<const std::string*>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string* name : names) inFlight_.erase(inFlightKey(processSet, *name));
}

void TensorQueue::close(const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  closedStatus_ = status;
}

bool TensorQueue::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

}  // namespace kolo
