#include "kolo/completion_runner.h"

#include <chrono>
#include <thread>
#include <utility>

#include "common/thread_name.h"

namespace kolo {

CompletionRunner::~CompletionRunner() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
  ended_.wait(lock, [&] { return threads_ == 0; });
}

void CompletionRunner::post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.push_back(std::move(task));
  if (idle_ > 0) {
    cv_.notify_one();
    return;
  }
  ++threads_;
  std::thread([this] {
    nameThisThread("kolo-complete");
    run();
  }).detach();
}

int CompletionRunner::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_;
}

void CompletionRunner::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (tasks_.empty()) {
      if (stop_) break;
      ++idle_;
      const bool woken =
          cv_.wait_for(lock, std::chrono::seconds(5), [&] { return !tasks_.empty() || stop_; });
      --idle_;
      if (!woken && threads_ > 1) break;
      continue;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.erase(tasks_.begin());
    lock.unlock();
    try {
      task();
    } catch (...) {
      // The task's own result says why (a future holds its error).
    }
    lock.lock();
  }
  --threads_;
  ended_.notify_all();
}

}  // namespace kolo
