#include "engine/handle_state.h"
#include "engine/spin.h"
#include "kolo/engine.h"

namespace kolo {
namespace {

using Clock = std::chrono::steady_clock;

HandleState& checked(const std::shared_ptr<HandleState>& s) {
  if (!s) throw InvalidArgument("kolo::Handle is empty (default-constructed)");
  return *s;
}

// Waits until flag is set: spins for up to s.spin (nothing to wake: the
// background thread's wake() then makes no system call), then blocks on
// s.cv, counted in s.sleepers, until flag or deadline. Returns the flag;
// lock holds s.mu on return.
bool await(HandleState& s, const std::atomic<bool>& flag, std::unique_lock<std::mutex>& lock,
           Clock::time_point deadline = Clock::time_point::max()) {
  if (s.spin.count() > 0 && !flag.load(std::memory_order_acquire)) {
    const auto now = Clock::now();
    const auto spinEnd = deadline - now > s.spin ? now + s.spin : deadline;
    detail::spinUntil(spinEnd, [&] { return flag.load(std::memory_order_acquire); });
  }
  lock = std::unique_lock<std::mutex>(s.mu);
  if (flag.load(std::memory_order_relaxed)) return true;  // set under mu: lock orders it
  s.sleepers.fetch_add(1, std::memory_order_relaxed);
  const auto ready = [&] { return flag.load(std::memory_order_relaxed); };
  bool result;
  if (deadline == Clock::time_point::max()) {
    s.cv.wait(lock, ready);
    result = true;
  } else {
    result = s.cv.wait_until(lock, deadline, ready);
  }
  s.sleepers.fetch_sub(1, std::memory_order_relaxed);
  return result;
}

}  // namespace

bool Handle::poll() const {
  return checked(state_).doneFlag.load(std::memory_order_acquire);
}

bool Handle::waitFor(std::chrono::milliseconds timeout) const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock;
  // Beyond a few years: no deadline (and no overflow of the time point).
  if (timeout > std::chrono::hours(24 * 365 * 10)) return await(s, s.doneFlag, lock);
  return await(s, s.doneFlag, lock, Clock::now() + timeout);
}

void Handle::wait() const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock;
  await(s, s.doneFlag, lock);
  s.status.throwIfError();
}

void* Handle::waitEnqueued() const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock;
  await(s, s.stageFlag, lock);
  if (s.done) {
    s.status.throwIfError();
    return nullptr;
  }
  return s.doneEvent.get();
}

bool Handle::enqueued() const {
  return checked(state_).stageFlag.load(std::memory_order_acquire);
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
