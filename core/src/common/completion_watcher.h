// CompletionWatcher: completes work that a device finishes in order (the
// responses on one GPU's comm stream) without polling the device.
//
// The producer (the engine's loop thread) opens a fence after enqueuing a
// response's device work and asks the device to call signal() once it gets
// there (for CUDA: cudaLaunchHostFunc on the comm stream right after the
// work). It then attaches what must happen at completion with then(); the
// watcher's own thread runs it once the fence is signalled. Device work
// ends in order, so a signal covers every earlier fence too.
//
// Nothing here polls the device. While fences are open the watcher thread
// wakes every checkInterval to call the health check (NCCL's asynchronous
// error and the device's sticky fault: host-side reads) and to enforce the
// timeout; it also asks the health check before it calls signalled fences
// done (work behind an aborted collective still reaches its signal). An
// error fails every open fence and every later one, after calling
// onFailure (which aborts the communicator and drains the device, so
// nothing is released while the device may still touch it).
//
// CUDA-free so that its logic is tested in every build.
//
// Threading: open() and then() from one producer thread; signal() from any
// thread (a CUDA host callback: it must not call CUDA, and it only locks
// and notifies); callbacks run on the watcher thread, or on the caller of
// then() when the fence is already settled, never under the watcher's lock.
//
// then() wakes the watcher thread only when it has something to do: the
// fence was signalled already (its callback can run), a failure or
// shutdown is under way, or the watcher sleeps without a deadline (it must
// start the health checks). While fences are open it sleeps until the next
// signal() or check anyway, so a then() right after open() (every response)
// costs the producer no wake-up of the watcher. Once the last fence
// settles it keeps to the check schedule until the next check is due
// before it sleeps without a deadline: fences that follow one another (a
// synchronous caller's small ops, each settled before the next is opened)
// cost one wake-up each, their signal's, not two.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "kolo/error.h"

namespace kolo {

class CompletionWatcher {
 public:
  using Clock = std::chrono::steady_clock;
  // status: ok, or why the fence's work failed; signalled: when the device
  // reached the fence (the time its signal() ran; Clock::time_point{} when
  // it failed first).
  using Callback = std::function<void(const Status& status, Clock::time_point signalled)>;

  struct Options {
    std::string what = "device";  // for messages: "GPU work on cuda:0"
    // How long a fence may stay open before it fails with Timeout.
    std::chrono::milliseconds timeout{60000};
    // How often the health check runs while fences are open.
    std::chrono::milliseconds checkInterval{100};
    // Returns an error when the device's work failed (ok otherwise).
    std::function<Status()> check;
    // Called once, on the watcher thread, when a fence fails (with the
    // failure), before any failed callback runs: stop the device's
    // outstanding work so later fences settle too, and return once the
    // device no longer touches their memory.
    std::function<void(const Status&)> onFailure;
  };

  explicit CompletionWatcher(Options options);
  // Settles what is still attached: callbacks of signalled fences with ok,
  // the others with ShutdownError. The caller makes sure no signal() comes
  // after this (drain(), then synchronise the device).
  ~CompletionWatcher();
  CompletionWatcher(const CompletionWatcher&) = delete;
  CompletionWatcher& operator=(const CompletionWatcher&) = delete;

  // A new fence, after every earlier one. Producer thread.
  uint64_t open();
  // What runs once fence settles; at most once per fence. Producer thread.
  // A fence whose then() has not come yet holds back the callbacks of later
  // fences while all is well; after a failure it no longer does (its work
  // failed, and a then() that comes later runs at once on the caller with
  // the outcome), so an exception between open() and then() cannot wedge
  // the watcher or drain().
  void then(uint64_t fence, Callback callback);
  // The device reached the next fence. Any thread; only locks and notifies.
  void signal();
  // The device reached fence (and so every earlier one): what a host
  // function placed after several fences reports, or a waiter that saw the
  // fence's done event reached. checked: the reporter asked the health
  // check's questions after the device got there and all was well (a
  // FenceProbe does), so fences up to it settle without another check. A
  // fence already reached counts as checked too when checked is set. Any
  // thread; only locks and notifies.
  void reach(uint64_t fence, bool checked = false);
  // Fails every open and future fence with status. Any thread.
  void fail(const Status& status);
  // Blocks until every fence opened so far was signalled or failed, and
  // every attached callback ran. Bounded by the timeout: a fence that stays
  // open fails. Any thread but the watcher's.
  void drain();
  // drain() that gives up after limit (a callback or onFailure that does
  // not return); false then.
  bool drainFor(std::chrono::milliseconds limit);

  // Fences opened and not yet signalled or failed.
  size_t pending() const;
  // The last fence the device is known to have reached (signal, reach).
  uint64_t reached() const;
  // How often the watcher thread woke from a wait so far (tests: then()
  // wakes it only when it has something to do).
  uint64_t wakeups() const;
  // The first failure, or ok.
  Status failure() const;

 private:
  struct Fence {
    Clock::time_point opened;
    Clock::time_point signalled{};  // Clock::time_point{}: not yet
    Callback callback;
  };
  void runWatcher();
  // signal() and reach() under mu_: whether the device got further.
  bool reachLocked(uint64_t fence, bool checked, Clock::time_point now);
  // The fence numbered n (base_ < n <= base_ + fences_.size()).
  Fence& at(uint64_t n) { return fences_[static_cast<size_t>(n - base_ - 1)]; }

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the watcher thread
  std::condition_variable drained_;  // wakes drain()
  std::deque<Fence> fences_;  // guarded by mu_: fences base_+1 .. base_+size, oldest first
  uint64_t base_ = 0;         // guarded by mu_: fences up to here are settled and gone
  uint64_t signalled_ = 0;    // guarded by mu_: fences up to here reached the device
  uint64_t checked_ = 0;      // guarded by mu_: fences up to here need no health check
  bool running_ = false;      // guarded by mu_: the watcher runs callbacks right now
  Status failure_;            // guarded by mu_: set once
  bool stopping_ = false;     // guarded by mu_
  // guarded by mu_: the watcher sleeps without a deadline (no fence was
  // open), so a new fence must wake it to start the health checks.
  bool idle_ = false;
  uint64_t wakeups_ = 0;  // guarded by mu_
  std::thread thread_;
};

}  // namespace kolo
