#include "tensor_queue.h"

namespace kolo {

void TensorQueue::push(std::vector<PendingOp> ops) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) closedStatus_.throwIfError();
    std::unordered_set<std::string> batch;
    for (const auto& op : ops) {
      const std::string& name = op.msg.request.name;
      if (inFlight_.count(name) || !batch.insert(name).second) {
        throw InvalidArgument("duplicate name '" + name + "': an operation with this name is "
                              "still in flight; wait for it or give the new one another name");
      }
    }
    for (auto& op : ops) {
      inFlight_.insert(op.msg.request.name);
      queue_.push_back(std::move(op));
    }
  }
  cv_.notify_one();
}

std::vector<PendingOp> TensorQueue::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PendingOp> out;
  out.swap(queue_);
  return out;
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

void TensorQueue::release(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  inFlight_.erase(name);
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
