#include "engine/tensor_queue.h"

namespace kolo {
namespace {

// Names are per process set: set 0's keys are the names themselves.
std::string inFlightKey(int processSet, const std::string& name) {
  if (processSet == 0) return name;
  return std::to_string(processSet) + '\0' + name;
}

}  // namespace

void TensorQueue::push(std::vector<PendingOp> ops) {
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
  }
  cv_.notify_one();
}

void TensorQueue::drainInto(std::vector<PendingOp>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(queue_);
}

void TensorQueue::waitForWork(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return !queue_.empty() || woken_; });
  woken_ = false;
}

void TensorQueue::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
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
