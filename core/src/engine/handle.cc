#include "engine/handle_state.h"
#include "kolo/engine.h"

namespace kolo {
namespace {

HandleState& checked(const std::shared_ptr<HandleState>& s) {
  if (!s) throw InvalidArgument("kolo::Handle is empty (default-constructed)");
  return *s;
}

}  // namespace

bool Handle::poll() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.done;
}

bool Handle::waitFor(std::chrono::milliseconds timeout) const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock(s.mu);
  return s.cv.wait_for(lock, timeout, [&] { return s.done; });
}

void Handle::wait() const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] { return s.done; });
  s.status.throwIfError();
}

void* Handle::waitEnqueued() const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] { return s.done || s.enqueued; });
  if (s.done) {
    s.status.throwIfError();
    return nullptr;
  }
  return s.doneEvent.get();
}

bool Handle::enqueued() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.done || s.enqueued;
}

Status Handle::status() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.done) return Status{ErrorCode::kInternal, "operation still in progress"};
  return s.status;
}

std::vector<int64_t> Handle::outputShape() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.outputShape;
}

std::vector<int64_t> Handle::receivedSplits() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.receivedSplits;
}

int Handle::joinResult() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.joinResult;
}

}  // namespace kolo
