#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "execution/handle_state.h"
#include "engine/spin.h"
#include "kolo/engine.h"

namespace kolo {
namespace {

using Clock = std::chrono::steady_clock;

HandleState& checked(const std::shared_ptr<HandleState>& s) {
  if (!s) throw InvalidArgument("kolo::Handle is empty (default-constructed)");
  return *s;
}

// Waits for stage one (waitEnqueued): spins for up to s.spin (nothing to
// wake: the background thread's wake() then makes no system call), then
// blocks on s.cv, counted in s.sleepers and s.stageSleepers, until
// stageFlag. Returns with lock holding s.mu.
void awaitStage(HandleState& s, std::unique_lock<std::mutex>& lock) {
  if (s.spin.count() > 0 && !s.stageFlag.load(std::memory_order_acquire)) {
    detail::spinUntil(Clock::now() + s.spin,
                      [&] { return s.stageFlag.load(std::memory_order_acquire); });
  }
  lock = std::unique_lock<std::mutex>(s.mu);
  if (s.stageFlag.load(std::memory_order_relaxed)) return;  // set under mu: lock orders it
  s.sleepers.fetch_add(1, std::memory_order_relaxed);
  s.stageSleepers.fetch_add(1, std::memory_order_relaxed);
  s.cv.wait(lock, [&] { return s.stageFlag.load(std::memory_order_relaxed); });
  s.stageSleepers.fetch_sub(1, std::memory_order_relaxed);
  s.sleepers.fetch_sub(1, std::memory_order_relaxed);
}

// Polls for done for up to s.spin (bounded by deadline): the flag at every
// round and, for a CUDA operation past stage one, its done event every few
// rounds (HandleState::reachedDone; a device query costs more than a load).
// Returns whether done. Probes once even without a spin time.
bool spinDone(HandleState& s, Clock::time_point deadline) {
  if (s.reachedDone()) return true;
  if (s.spin.count() <= 0) return false;
  const auto now = Clock::now();
  const auto spinEnd = deadline - now > s.spin ? now + s.spin : deadline;
  unsigned round = 0;
  return detail::spinUntil(spinEnd, [&] {
    if (s.doneFlag.load(std::memory_order_acquire)) return true;
    return ++round % 8 == 0 && s.reachedDone();
  });
}

// Waits until done, or deadline: spinDone, then blocks on s.cv, counted in
// s.sleepers. A CUDA operation whose stage one had not come when the wait
// began polls its done event once more when it comes (a spinDone: the GPU
// work of a small operation finishes microseconds after it was enqueued);
// the waiter then waits for stage one too (s.stageSleepers), so
// markEnqueued wakes it. Otherwise it sleeps until finish() wakes it.
// Returns whether done; lock holds s.mu on return.
bool awaitDone(HandleState& s, std::unique_lock<std::mutex>& lock,
               Clock::time_point deadline = Clock::time_point::max()) {
  bool respin = !s.stageFlag.load(std::memory_order_acquire);
  if (spinDone(s, deadline)) {
    lock = std::unique_lock<std::mutex>(s.mu);
    return true;
  }
  lock = std::unique_lock<std::mutex>(s.mu);
  for (;;) {
    if (s.done) return true;  // under mu
    // Only GPU work reports stage one with a probe; the rest completes
    // through finish() alone.
    const bool stageOne = s.enqueued && s.probe != nullptr;
    if (respin && stageOne) {
      respin = false;
      lock.unlock();
      const bool done = spinDone(s, deadline);
      lock.lock();
      if (done) return true;
      continue;
    }
    if (Clock::now() >= deadline) return false;
    const bool watchStage = respin && !s.stageFlag.load(std::memory_order_relaxed);
    s.sleepers.fetch_add(1, std::memory_order_relaxed);
    if (watchStage) s.stageSleepers.fetch_add(1, std::memory_order_relaxed);
    const auto ready = [&] {
      return s.done || (watchStage && s.stageFlag.load(std::memory_order_relaxed));
    };
    if (deadline == Clock::time_point::max()) {
      s.cv.wait(lock, ready);
    } else {
      (void)s.cv.wait_until(lock, deadline, ready);
    }
    if (watchStage) s.stageSleepers.fetch_sub(1, std::memory_order_relaxed);
    s.sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

// Runs the engine's cycles on this thread until s is done (stage one, for
// the engine never lets a caller run CUDA work), when no thread runs them
// now (CycleGate): a synchronous caller then costs no hand-off to the loop
// thread and back. Returns otherwise (the loop thread or another caller
// is in a cycle, or the engine said no).
void driveIfIdle(HandleState& s) {
  if (!s.gate || s.stageFlag.load(std::memory_order_acquire) ||
      tCycleGateHeld == s.gate.get() || s.gate->loopOnly.load(std::memory_order_relaxed)) {
    return;
  }
  std::unique_lock<std::mutex> lock(s.gate->mu, std::try_to_lock);
  // The holder may be ending its iteration: the loop thread that completed
  // this caller's previous op (its callback woke this caller) often is.
  // Look again for a moment before leaving the cycles to it.
  if (!lock.owns_lock() &&
      !detail::spinUntil(Clock::now() + CycleGate::kGateRetry, [&] {
        return s.stageFlag.load(std::memory_order_acquire) || lock.try_lock();
      })) {
    return;
  }
  if (!lock.owns_lock() || s.gate->engine == nullptr) return;  // done meanwhile, or ended
  struct Held {  // this thread holds the gate (restored on any exit)
    const CycleGate* outer = tCycleGateHeld;  // another engine's, if any
    explicit Held(const CycleGate* g) { tCycleGateHeld = g; }
    ~Held() { tCycleGateHeld = outer; }
  } held(s.gate.get());
  s.gate->engine->driveUntilDone(s);
}

}  // namespace

bool Handle::poll() const { return checked(state_).reachedDone(); }

bool Handle::waitFor(std::chrono::milliseconds timeout) const {
  auto& s = checked(state_);
  std::unique_lock<std::mutex> lock;
  // Beyond a few years: no deadline (and no overflow of the time point).
  if (timeout > std::chrono::hours(24 * 365 * 10)) return awaitDone(s, lock);
  return awaitDone(s, lock, Clock::now() + timeout);
}

void Handle::wait() const {
  auto& s = checked(state_);
  driveIfIdle(s);
  std::unique_lock<std::mutex> lock;
  awaitDone(s, lock);
  // This caller's next op most likely follows at once (CycleGate).
  if (s.gate && !s.gate->loopOnly.load(std::memory_order_relaxed)) {
    s.gate->lastWaitNs.store(CycleGate::nowNs(), std::memory_order_relaxed);
  }
  s.status.throwIfError();
}

void* Handle::waitEnqueued() const {
  auto& s = checked(state_);
  driveIfIdle(s);
  std::unique_lock<std::mutex> lock;
  awaitStage(s, lock);
  if (s.done) {
    s.status.throwIfError();
    return nullptr;
  }
  return s.doneEvent.get();
}

std::vector<Handle::DoneEvent> Handle::lastDoneEvents(const std::vector<const Handle*>& handles) {
  struct Last {
    uint64_t stream;  // GpuFence::stream; 0: unknown (handles made by hand)
    uint64_t sequence;
    DoneEvent done;
  };
  std::vector<Last> last;  // one per comm stream: a handful at most
  for (const Handle* h : handles) {
    if (h == nullptr || !h->state_) continue;
    const HandleState& s = *h->state_;
    // stageFlag (acquire) makes the done event's fields readable without
    // mu; finish() sets doneFlag before stageFlag, so stage one without
    // done is markEnqueued's.
    if (!s.stageFlag.load(std::memory_order_acquire) ||
        s.doneFlag.load(std::memory_order_acquire) || !s.doneEvent) {
      continue;
    }
    const DoneEvent done{s.doneEvent.get(), s.doneDevice};
    bool merged = false;
    for (Last& l : last) {
      const bool same = s.doneStream != 0 ? l.stream == s.doneStream
                                          : l.stream == 0 && l.done.event == done.event;
      if (!same) continue;
      if (s.doneSequence > l.sequence) {
        l.sequence = s.doneSequence;
        l.done = done;
      }
      merged = true;
      break;
    }
    if (!merged) last.push_back(Last{s.doneStream, s.doneSequence, done});
  }
  std::vector<DoneEvent> out;
  out.reserve(last.size());
  for (const Last& l : last) out.push_back(l.done);
  return out;
}

bool Handle::enqueued() const {
  return checked(state_).stageFlag.load(std::memory_order_acquire);
}

Status Handle::status() const {
  auto& s = checked(state_);
  (void)s.reachedDone();  // consistent with poll()
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

int Handle::source() const {
  auto& s = checked(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.source;
}

}  // namespace kolo
