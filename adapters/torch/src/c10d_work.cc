#include "c10d_work.h"

#include <ATen/core/jit_type.h>

#include <chrono>
#include <thread>
#include <utility>

#include "compat.h"

namespace kolo::torch::detail {

namespace {

c10::SourceLocation here(const char* function) { return {function, __FILE__, __LINE__}; }

std::string labelled(const std::string& message, const std::string& label) {
  if (label.empty() || message.rfind(label, 0) == 0) return message;
  return "kolo " + label + ": " + message;
}

}  // namespace

std::exception_ptr torchError(const kolo::Status& status, const std::string& label) {
  const std::string message = labelled(status.message, label);
  if (status.code == kolo::ErrorCode::kInvalidArgument) {
    return std::make_exception_ptr(c10::ValueError(here(__func__), message));
  }
#if KOLO_TORCH_VERSION_AT_LEAST(2, 0)
  return std::make_exception_ptr(c10::DistBackendError(here(__func__), message));
#else
  return std::make_exception_ptr(c10::Error(here(__func__), message));
#endif
}

void rethrowAsTorch(const std::string& label) {
  try {
    throw;
  } catch (const c10::Error&) {
    throw;
  } catch (const kolo::Error& e) {
    std::rethrow_exception(torchError(kolo::Status{e.code(), e.what()}, label));
  } catch (const std::exception& e) {
    std::rethrow_exception(torchError(kolo::Status{kolo::ErrorCode::kInternal, e.what()}, label));
  }
}

kolo::CompletionRunner& completionRunner() {
  // Leaked on purpose: its threads may still run at static destruction.
  static kolo::CompletionRunner* runner = new kolo::CompletionRunner();
  return *runner;
}

}  // namespace kolo::torch::detail

namespace kolo::torch {

using detail::torchError;

ProcessGroupKolo::WorkKolo::WorkKolo(int rank, ::c10d::OpType type, std::string label,
                                     std::string name, at::Device device,
                                     std::vector<at::Tensor> outputs,
                                     std::function<void()> finish)
    : ::c10d::Work(rank, type),
      label_(std::move(label)),
      name_(std::move(name)),
      device_(device),
      outputs_(std::move(outputs)),
      finish_(std::move(finish)) {}

std::function<void(const kolo::Status&)> ProcessGroupKolo::WorkKolo::doneCallback(
    c10::intrusive_ptr<WorkKolo> work) {
  // The engine drops the entry, and with it this reference, once it ran.
  return [work = std::move(work)](const kolo::Status& status) { work->opDone(status); };
}

void ProcessGroupKolo::WorkKolo::expect(int operations) {
  std::lock_guard<std::mutex> lock(mu_);
  remaining_ = operations;
}

void ProcessGroupKolo::WorkKolo::keep(std::vector<at::Tensor> tensors) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : tensors) kept_.push_back(std::move(t));
}

void ProcessGroupKolo::WorkKolo::keepReady(std::shared_ptr<void> event) {
  if (!event) return;
  std::lock_guard<std::mutex> lock(mu_);
  readyEvents_.push_back(std::move(event));
}

void ProcessGroupKolo::WorkKolo::receivesFrom(std::vector<int> engineRanks) {
  std::lock_guard<std::mutex> lock(mu_);
  sourceRanks_ = std::move(engineRanks);
}

int ProcessGroupKolo::WorkKolo::sourceRank() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (handles_.empty() || remaining_ > 0) return -1;
  const int source = handles_[0].source();
  for (size_t r = 0; r < sourceRanks_.size(); ++r) {
    if (sourceRanks_[r] == source) return static_cast<int>(r);
  }
  return -1;
}

void ProcessGroupKolo::WorkKolo::started(std::vector<kolo::Handle> handles) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    handles_ = std::move(handles);
    started_ = true;
  }
  cv_.notify_all();
}

void ProcessGroupKolo::WorkKolo::failedToStart(const kolo::Status& why) {
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    remaining_ = 0;
    if (firstError_.ok()) firstError_ = why;
    post = futureWanted_ && !device_.is_cuda();
  }
  cv_.notify_all();
  if (post) postFuture();
}

void ProcessGroupKolo::WorkKolo::opDone(const kolo::Status& status) {
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok() && firstError_.ok()) firstError_ = status;
    // A CUDA work's future was posted when it was asked for (it completes
    // once the work is enqueued, as nccl's does).
    post = --remaining_ == 0 && futureWanted_ && !device_.is_cuda();
  }
  cv_.notify_all();
  if (post) postFuture();
}

bool ProcessGroupKolo::WorkKolo::waitStarted(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return started_; });
    return true;
  }
  return cv_.wait_for(lock, timeout, [&] { return started_; });
}

void ProcessGroupKolo::WorkKolo::finishOnce() {
  std::lock_guard<std::mutex> finishing(finishMu_);
  kolo::Status failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    failed = firstError_;
  }
  std::exception_ptr error;
  if (!failed.ok()) {
    error = torchError(failed, label_);
  } else if (finish_) {
    try {
      finish_();
    } catch (...) {
      try {
        detail::rethrowAsTorch(label_);
      } catch (...) {
        error = std::current_exception();
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  error_ = error;
  finished_ = true;
}

bool ProcessGroupKolo::WorkKolo::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || remaining_ > 0) return false;
  }
  finishOnce();
  return true;
}

bool ProcessGroupKolo::WorkKolo::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_ || remaining_ > 0) return false;
  return firstError_.ok() && (!finished_ || !error_);
}

std::exception_ptr ProcessGroupKolo::WorkKolo::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_ || remaining_ > 0) return nullptr;
  if (finished_) return error_;
  return firstError_.ok() ? nullptr : torchError(firstError_, label_);
}

std::vector<at::Tensor> ProcessGroupKolo::WorkKolo::result() { return outputs_; }

void ProcessGroupKolo::WorkKolo::synchronize() { wait(kNoTimeout); }

bool ProcessGroupKolo::WorkKolo::wait(std::chrono::milliseconds timeout) {
  const auto begin = std::chrono::steady_clock::now();
  auto left = [&] {
    auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - begin);
    return std::max(std::chrono::milliseconds(1), timeout - spent);
  };
  auto timedOut = [&] {
    std::rethrow_exception(torchError(
        kolo::Status{kolo::ErrorCode::kTimeout,
                     name_ + ": Work::wait timed out after " + std::to_string(timeout.count()) +
                         " ms; the call is still pending (wait again, or raise the timeout)"},
        label_));
  };
  if (!waitStarted(timeout)) timedOut();
  std::vector<kolo::Handle> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handles = handles_;
  }
  for (const kolo::Handle& handle : handles) {
    if (timeout == kNoTimeout) {
      try {
        // CPU: done (this thread may run the engine's cycles meanwhile);
        // CUDA: enqueued, with the caller's stream waiting for the GPU work.
        compat::waitOnCurrentStream(handle, device_);
      } catch (const kolo::Error&) {
        // Recorded by the operation's onDone; raised below.
      }
    } else if (!handle.waitFor(left())) {
      timedOut();
    }
  }
  finishOnce();
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> ProcessGroupKolo::WorkKolo::getFuture() {
  bool post = false;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!future_) {
      std::vector<c10::Device> devices;
      if (device_.is_cuda()) devices.push_back(device_);
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), devices);
      futureWanted_ = true;
      post = device_.is_cuda() || (started_ && remaining_ == 0);
    }
    future = future_;
  }
  if (post) postFuture();
  return future;
}

void ProcessGroupKolo::WorkKolo::postFuture() {
  // Off the engine's thread: the future's callbacks may wait on kolo.
  c10::intrusive_ptr<WorkKolo> self =
      c10::intrusive_ptr<WorkKolo>::unsafe_reclaim_from_nonowning(this);
  detail::completionRunner().post([self] { self->completeFuture(); });
}

void ProcessGroupKolo::WorkKolo::completeFuture() {
  compat::DeviceGuard guard(device_);
  // CUDA: complete once the work is enqueued, on a stream that waits for
  // it; the future's value is then ready for every stream that waits on
  // the future, as nccl's futures are (the host does not wait for the GPU).
  compat::PoolStreamGuard stream(device_);
  if (device_.is_cuda()) {
    waitStarted(kNoTimeout);
    std::vector<std::pair<kolo::Handle, at::Device>> handles;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const kolo::Handle& h : handles_) handles.emplace_back(h, device_);
    }
    try {
      compat::waitAllOnCurrentStream(handles);
    } catch (const kolo::Error&) {
      // Recorded by the operation's onDone; finishOnce() raises it.
    }
  }
  finishOnce();
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    future = future_;
    error = error_;
  }
  if (error) {
    future->setError(error);
  } else {
    future->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace kolo::torch
