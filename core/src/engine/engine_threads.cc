// Who runs the engine's cycles: its background loop thread, or a caller
// waiting for its operation while that thread is idle (driveUntilDone).
// Either holds the CycleGate (execution/handle_state.h) for each iteration it
// runs (iterateOnLoop, engine_loop.cc).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <utility>

#include "engine/engine_impl.h"

namespace kolo {

void Engine::Impl::loopOnLoop() {
  cyclesOnLoop();
  {
    // Callers waiting from now on sleep until their ops fail or finish.
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->engine = nullptr;
  }
  finishOnLoop();
  // The process sets' backends and the GPU state end here, on the thread
  // that worked with them: pinned to the rank's device and in thread-local
  // capture mode (device/runtime.h). The comm streams' drain and destroy,
  // the buffers' frees and NCCL's finalize would otherwise run on the
  // thread that destroys the engine (kolo::shutdown's caller), which may
  // never have set a device (a context on GPU 0) and may break a graph
  // capture of the user's.
  sets.clear();
  gpuDevices.reset();
}

void Engine::Impl::finishOnLoop() {
  std::unique_ptr<timeline::Timeline> next;
  {
    std::lock_guard<std::mutex> lock(timelineMu);
    loopDone = true;
    next = std::move(timelineNext);
  }
  timelineCv.notify_all();
  for (auto& [id, set] : sets) {
    if (set->executor) set->executor->setTimeline(nullptr);
  }
  if (timeline) {
    timeline->close();
    if (timeline->dropped() > 0) {
      log->warn("timeline {}: {} events dropped (writer could not keep up)", timeline->path(),
                timeline->dropped());
    }
    timeline.reset();
  }
  if (next) next->close();
}

void Engine::Impl::cyclesOnLoop() {
  auto cycleStart = std::chrono::steady_clock::now();
  int idleCycles = 0;  // iterations in a row with nothing pending on any rank
  // What the waits below read of the cycles' state, copied while this
  // thread holds the gate (a caller's cycle may change it meanwhile).
  std::chrono::microseconds cycleTime = config.cycleTime;
  std::chrono::steady_clock::time_point lastWork{};
  // While a caller runs the cycles (gateBusy: it held the gate when this
  // thread last looked), or did so within the last second, this thread
  // sleeps until woken (wake(), or a push outside CycleGate::kDriveWindow)
  // or for a cycle time (as Horovod's loop does): a push right after a
  // caller's drive does not wake it, since that caller most likely drains
  // it, and an op nobody drains (an async op right after synchronous ones)
  // is taken over within a cycle time. A caller wakes this thread when it
  // stops with work left. While nothing happens those waits double, up to
  // the idle back-off, and any push ends the longer ones: with hundreds of
  // ranks on a few cores, loop threads waking every cycle time while their
  // callers wait in a long collective would take the cores.
  bool gateBusy = false;
  int quietWaits = 0;  // such waits in a row that ended with nothing to do
  while (true) {
    // An idle rank backs off (2, 4, 8, 16 cycle times) instead of spending
    // ~3% of a core on empty cycles; new work still wakes it at once, and a
    // peer with work waits for it in the control allreduce without spinning.
    // Within KOLO_SPIN_TIME of the last response it executed, the loop polls
    // the queue instead of sleeping: the next operation of a step (or the
    // caller's next small one) then costs no wake-up. It never spins longer
    // after work, so an idle job sleeps.
    const auto deadline = cycleStart + cycleTime * (1 << std::min(idleCycles, 4));
    const bool driven = gateBusy || gate->droveWithin(CycleGate::kCallersLately);
    if (!driven) {
      queue.waitForWork(deadline, lastWork + spinTime, [this] { flushGpuSignalsBeforeSleep(); });
    } else if (gateBusy || !queue.hasWork()) {  // a held gate: never retry without a wait
      // A held gate: its holder runs the cycles, so only the back-off
      // bounds this wait; otherwise an idle cycle may be due first.
      const int shift = std::min(quietWaits, 4);
      const auto now = std::chrono::steady_clock::now();
      auto until = now + cycleTime * (1 << shift);
      if (!gateBusy) until = std::min(until, deadline);
      if (until > now) flushGpuSignalsBeforeSleep();  // none for a cycle that is due now
      const bool woken = queue.waitForWake(until, shift > 0);
      quietWaits = woken || queue.hasWork() ? 0 : quietWaits + 1;
      if (!woken && !queue.hasWork() && std::chrono::steady_clock::now() < deadline) {
        continue;  // nothing is due: stay out of the callers' way (and off the gate)
      }
    }
    // Work pushed right after a caller's drive or wait: that caller drains
    // it in a moment, having pushed it before waiting. Taking it now would
    // win that cycle, and every one after it (CycleGate::kDriveWindow).
    if (gate->callersDriving() && queue.hasWork() && callerMayDrive() &&
        !queue.waitForWake(gate->driveWindowEnd())) {
      continue;
    }
    std::unique_lock<std::mutex> lock(gate->mu, std::try_to_lock);
    gateBusy = !lock.owns_lock();
    if (gateBusy) {
      // A caller is in a cycle: look again when it wakes this thread, or a
      // cycle time from now (the deadline may have passed: no busy loop).
      cycleStart = std::chrono::steady_clock::now();
      continue;
    }
    if (gate->engine == nullptr) return;  // a caller's cycle ended the loop
    tCycleGateHeld = gate.get();
    cycleStart = std::chrono::steady_clock::now();
    bool busy = false;
    const Iteration done = iterateOnLoop(cycleStart, busy, false);
    // The fences of this iteration's CUDA responses that a waiter may
    // still report while this thread spins keep no host function yet.
    if (done == Iteration::kDone) {
      flushGpuSignalsOnLoop(std::chrono::steady_clock::now() - spinTime);
    }
    tCycleGateHeld = nullptr;
    if (done == Iteration::kEnded) return;
    cycleTime = tunables.cycleTime;
    lastWork = lastWorkOnLoop;
    idleCycles = busy ? 0 : idleCycles + 1;
  }
}

void Engine::Impl::flushGpuSignalsOnLoop(
    std::chrono::steady_clock::time_point openedBefore) noexcept {
  for (const auto& [id, set] : sets) {
    if (set->executor) set->executor->flushGpuSignals(openedBefore);
  }
}

void Engine::Impl::flushGpuSignalsBeforeSleep() noexcept {
  // Only CUDA responses open fences, and once one was queued no caller
  // runs the cycles again (CycleGate::loopOnly). Before that, a caller may
  // hold the gate and change the sets: then there is nothing to flush.
  if (!gate->loopOnly.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(gate->mu, std::try_to_lock);
  if (!lock.owns_lock() || gate->engine == nullptr) return;
  flushGpuSignalsOnLoop(std::chrono::steady_clock::time_point::max());
}

void Engine::Impl::driveUntilDone(HandleState& s) {
  // A CUDA op or a join: the loop thread runs the cycles (their pushes
  // woke it: Impl::push asks callerMayDrive() too).
  if (!callerMayDrive()) return;
  // Set before the cycles, so that pushes meanwhile leave the loop thread
  // asleep, and after them, for the next synchronous op's push.
  gate->lastDriveNs.store(CycleGate::nowNs(), std::memory_order_relaxed);
  Iteration done = Iteration::kDone;
  while (!s.stageFlag.load(std::memory_order_acquire)) {  // done, for the CPU ops driven here
    bool busy = false;
    done = iterateOnLoop(std::chrono::steady_clock::now(), busy, true);
    if (done != Iteration::kDone) break;
  }
  gate->lastDriveNs.store(CycleGate::nowNs(), std::memory_order_relaxed);
  // The loop ended: no cycle runs again (the loop thread exits when it looks).
  if (done == Iteration::kEnded) gate->engine = nullptr;
  // The loop thread takes over what is left: ops other threads queued (or
  // this one yielded), the failure's end. Nothing left: it sleeps on.
  bool left = done != Iteration::kDone || !drained.empty() || queue.hasWork();
  for (const auto& [id, set] : sets) {
    left = left || !set->pending.empty() || !set->fresh.empty();
  }
  if (left) queue.wake();
}

}  // namespace kolo
