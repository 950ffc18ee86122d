// Engine's cycles: drain, negotiate, execute, complete. Run by the
// background loop thread, or by a caller waiting for its operation while
// that thread is idle (driveUntilDone); either holds the CycleGate.
//
// One loop iteration runs one negotiation cycle of every process set this
// rank belongs to, set 0 first, then the others in increasing id. Every
// member of a set therefore runs that set's cycles in the same sequence,
// interleaved with the other sets' in one global order ((iteration, id)),
// which keeps the sets deadlock-free among each other; a rank never runs
// the cycles of a set it is not in.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/bounded_call.h"
#include "engine/engine_impl.h"

namespace kolo {

// ---------------------------------------------------------------------------
// Background loop.

void Engine::Impl::loopOnLoop() {
  cyclesOnLoop();
  {
    // Callers waiting from now on sleep until their ops fail or finish.
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->engine = nullptr;
  }
  finishOnLoop();
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
  // or for a cycle time at most (as Horovod's loop does): a push right
  // after a caller's drive does not wake it, since that caller most likely
  // drains it, and an op nobody drains (an async op right after
  // synchronous ones) is taken over within a cycle time. A caller wakes
  // this thread when it stops with work left.
  constexpr auto kCallersLately = std::chrono::seconds(1);
  bool gateBusy = false;
  while (true) {
    // An idle rank backs off (2, 4, 8, 16 cycle times) instead of spending
    // ~3% of a core on empty cycles; new work still wakes it at once, and a
    // peer with work waits for it in the control allreduce without spinning.
    // Within KOLO_SPIN_TIME of the last response it executed, the loop polls
    // the queue instead of sleeping: the next operation of a step (or the
    // caller's next small one) then costs no wake-up. It never spins longer
    // after work, so an idle job sleeps.
    const auto deadline = cycleStart + cycleTime * (1 << std::min(idleCycles, 4));
    const bool driven = gateBusy || gate->droveWithin(kCallersLately);
    if (!driven) {
      queue.waitForWork(deadline, lastWork + spinTime);
    } else if (gateBusy || !queue.hasWork()) {  // a held gate: never retry without a wait
      const bool woken =
          queue.waitForWake(std::min(deadline, std::chrono::steady_clock::now() + cycleTime));
      if (!woken && !queue.hasWork() && std::chrono::steady_clock::now() < deadline) {
        continue;  // nothing is due: stay out of the callers' way (and off the gate)
      }
    }
    std::unique_lock<std::mutex> lock(gate->mu, std::try_to_lock);
    gateBusy = !lock.owns_lock();
    if (gateBusy) {
      // A caller is in a cycle: look again when it wakes this thread, or a
      // cycle time from now (the deadline may have passed: no busy loop).
      cycleStart = std::chrono::steady_clock::now();
      continue;
    }
    if (loopEnded) return;
    tCycleGateHeld = gate.get();
    cycleStart = std::chrono::steady_clock::now();
    bool busy = false;
    const Iteration done = iterateOnLoop(cycleStart, busy, false);
    tCycleGateHeld = nullptr;
    if (done == Iteration::kEnded) return;
    cycleTime = tunables.cycleTime;
    lastWork = lastWorkOnLoop;
    idleCycles = busy ? 0 : idleCycles + 1;
  }
}

Engine::Impl::Iteration Engine::Impl::iterateOnLoop(std::chrono::steady_clock::time_point cycleStart,
                                                    bool& busy, bool onCaller) {
  if (timelineChange.load(std::memory_order_acquire)) applyTimelineOnLoop();
  queue.drainInto(drained);
  // What callerMayDrive() reads is set before the op that changes it is
  // queued, so seen here once drained: the drained ops wait in drained for
  // the loop thread's next iteration.
  if (onCaller && !callerMayDrive()) return Iteration::kYield;
  try {
    if (gpuEvents->any.load(std::memory_order_acquire)) gpuEventsOnLoop();
    // Set 0 first: its responses may add or remove sets, which every
    // rank does at this same point; the other sets then run as they are
    // after it.
    routeOnLoop(drained, true);
    if (!cycleOnLoop(*sets.at(0), cycleStart, busy)) return Iteration::kEnded;
    routeOnLoop(drained, false);
    // Only set 0's cycle (above) adds or removes sets.
    cycleIds.clear();
    for (const auto& [id, set] : sets) {
      if (id != 0) cycleIds.push_back(id);
    }
    for (int id : cycleIds) {
      if (!cycleOnLoop(*sets.at(id), cycleStart, busy)) return Iteration::kEnded;
    }
    if (tuner) {
      if (auto d = tuner->onCycle(std::chrono::steady_clock::now(),
                                  totalStatsOnLoop().bytesReduced)) {
        proposal = d;
      }
    }
  } catch (const std::exception& e) {
    Status s = diagnoseFailure(e, *store, identity, config.timeout);
    log->error("{}", s.message);
    failAllOnLoop(s);
    // Closing our connections makes peers blocked on us fail promptly.
    sets.clear();
    return Iteration::kEnded;
  }
  publishStatsOnLoop();
  return Iteration::kDone;
}

void Engine::Impl::driveUntilDone(HandleState& s) {
  if (loopEnded || !callerMayDrive()) return;
  Iteration done = Iteration::kDone;
  while (!s.stageFlag.load(std::memory_order_acquire)) {  // done, for the CPU ops driven here
    bool busy = false;
    done = iterateOnLoop(std::chrono::steady_clock::now(), busy, true);
    if (done != Iteration::kDone) break;
  }
  if (done == Iteration::kEnded) loopEnded = true;
  // The loop thread takes over what is left: ops other threads queued (or
  // this one yielded), the failure's end. Nothing left: it sleeps on.
  bool left = done != Iteration::kDone || !drained.empty() || queue.hasWork();
  for (const auto& [id, set] : sets) {
    left = left || !set->pending.empty() || !set->fresh.empty();
  }
  if (left) queue.wake();
}

void Engine::Impl::routeOnLoop(std::vector<PendingOp>& ops, bool globalOnly) {
  auto rest = ops.begin();
  for (auto& op : ops) {
    const int id = op.msg.request.processSet;
    if (globalOnly && id != 0) {
      // Kept for the second pass, after set 0's cycle.
      if (&*rest != &op) *rest = std::move(op);
      ++rest;
      continue;
    }
    auto it = sets.find(id);
    if (it != sets.end()) {
      it->second->fresh.push_back(std::move(op));
      continue;
    }
    // Removed after this op was queued (the caller checked it existed).
    failUnroutedOnLoop(op, Status{ErrorCode::kInvalidArgument,
                                  "'" + op.msg.request.name + "': process set " +
                                      std::to_string(id) +
                                      " was removed before this operation ran"});
  }
  ops.erase(globalOnly ? rest : ops.begin(), ops.end());
}

void Engine::Impl::failUnroutedOnLoop(PendingOp& op, const Status& status) {
  std::vector<const std::string*> names{&op.msg.request.name};
  queue.release(op.msg.request.processSet, names);
  if (op.entry.onDone) {
    try {
      op.entry.onDone(status);
    } catch (const std::exception& e) {
      log->error("completion callback for '{}' threw: {}", op.msg.request.name, e.what());
    }
  }
  op.handle->finish(status);
  op.handle->wake();
}

bool Engine::Impl::cycleOnLoop(ProcessSetState& set, std::chrono::steady_clock::time_point now,
                               bool& busy) {
  const bool global = set.id == 0;
  CycleInput in;
  admitOnLoop(set, in);
  if (global) {
    in.shutdown = shutdownRequested.load();
    in.abort = abortRequested.load();
    if (in.abort) {
      std::lock_guard<std::mutex> lock(mu);
      in.abortMessage = abortMessage;
    }
    if (identity.rank == 0) in.tune = proposal;
    // Ops of other sets still in drained count too: they run after this.
    in.busy = !drained.empty();
    for (const auto& [id, other] : sets) {
      in.busy = in.busy || !other->pending.empty() || !other->fresh.empty();
    }
  }
  if (set.identity.rank == 0) in.stallCheckDue = set.stall.checkDue(now);
  CycleOutput out = set.controller->runCycle(in);
  for (auto& [name, op] : set.pending) {
    if (op.state == PendingOp::State::kNew) op.state = PendingOp::State::kSent;
  }
  if (out.stop) {
    failAllOnLoop(stopStatus(out.stopInfo, identity.rank));
    return false;
  }
  if (out.tuned) applyTunedOnLoop(*out.tuned);
  revertEvictedOnLoop(set, out.evictedBits);
  if (timeline) {
    traceNegotiatedOnLoop(set, out.cached);
    traceNegotiatedOnLoop(set, out.uncached);
    if (!out.cached.empty() || !out.uncached.empty()) {
      timeline->markCycle(timeline::Timeline::now());
    }
  }
  for (const auto& r : out.cached) executeOnLoop(set, r, true);
  for (const auto& r : out.uncached) executeOnLoop(set, r, false);
  if (!out.cached.empty() || !out.uncached.empty()) {
    lastWorkOnLoop = std::chrono::steady_clock::now();
  }
  // Pending tensors whose cache entries were just replaced negotiate again.
  revertEvictedOnLoop(set, set.evictedThisCycle);
  set.evictedThisCycle.clear();
  if (out.stallCheck && !stallRoundOnLoop(set)) return false;
  // Busy (no idle back-off) while this rank has work, and while any rank
  // has: an idle rank paces the set 0 cycles that every set runs after.
  busy = busy || out.anyBusy || !set.pending.empty() || !out.cached.empty() ||
         !out.uncached.empty();
  return true;
}

void Engine::Impl::admitOnLoop(ProcessSetState& set, CycleInput& in) {
  // Group members arrive in one drain (pushed atomically); a group uses the
  // cache only when every member hits.
  std::unordered_map<std::string, bool> groupAllHit;
  for (auto& op : set.fresh) {
    const Request& q = op.msg.request;
    if (timeline) traceAdmitOnLoop(set, op);
    if (cacheOnLoop(set) && ResponseCache::cacheable(q.op)) {
      int bit = -1;
      switch (set.cache.lookup(q, &bit)) {
        case ResponseCache::Lookup::kHit:
          op.state = PendingOp::State::kCached;
          op.bit = bit;
          break;
        case ResponseCache::Lookup::kChanged:
          set.invalidBits.push_back(bit);
          break;
        case ResponseCache::Lookup::kMiss:
          break;
      }
    }
    if (!op.msg.group.empty()) {
      auto it = groupAllHit.emplace(op.msg.group, true).first;
      it->second = it->second && op.state == PendingOp::State::kCached;
    }
  }
  for (auto& op : set.fresh) {
    if (!op.msg.group.empty() && !groupAllHit[op.msg.group]) {
      op.state = PendingOp::State::kNew;
      op.bit = -1;
    }
    std::string name = op.msg.request.name;
    set.pending.emplace(std::move(name), std::move(op));
  }
  set.fresh.clear();  // keeps its capacity for the next drain
  for (auto& [name, op] : set.pending) {
    if (op.state == PendingOp::State::kCached) in.readyBits.push_back(op.bit);
    if (op.state == PendingOp::State::kNew) in.uncached.push_back(op.msg);
  }
  in.invalidBits.swap(set.invalidBits);
  in.joined = set.joined[set.identity.rank];
}

void Engine::Impl::revertEvictedOnLoop(ProcessSetState& set, const std::vector<int>& bits) {
  if (bits.empty()) return;
  std::vector<bool> evicted(static_cast<size_t>(set.cache.capacity()), false);
  for (int bit : bits) evicted[bit] = true;
  for (auto& [name, op] : set.pending) {
    if (op.state == PendingOp::State::kCached && evicted[op.bit]) {
      op.state = PendingOp::State::kNew;
      op.bit = -1;
    }
  }
}

namespace {

// Tensor i of a (possibly fused) response, as the cache keeps it. Copies
// only that tensor's name and shape: copying the whole response per tensor
// made negotiating n fused tensors cost O(n^2).
Response singleResponse(const Response& r, size_t i) {
  Response single = r.withoutTensors();
  single.names = {r.names[i]};
  single.shapes = {r.shapes[i]};
  if (r.names.size() == 1) single.rankDims = r.rankDims;
  return single;
}

}  // namespace

void Engine::Impl::executeOnLoop(ProcessSetState& set, const Response& r, bool fromCache) {
  switch (r.kind) {
    case ResponseKind::kJoinAck:
      set.joined[r.rankArg] = true;
      return;
    case ResponseKind::kJoinDone: {
      std::fill(set.joined.begin(), set.joined.end(), false);
      auto it = set.pending.find(kJoinName);
      KOLO_ENFORCE(it != set.pending.end(), "join completed but this rank never joined");
      {
        std::lock_guard<std::mutex> lock(it->second.handle->mu);
        it->second.handle->joinResult = set.ranks[r.rankArg];
      }
      table.setJoined(set.id, false);
      completeOnLoop(set, {it}, Status::Ok());
      return;
    }
    case ResponseKind::kError: {
      std::vector<PendingMap::iterator> failed;
      for (const auto& name : r.names) {
        auto it = set.pending.find(name);
        if (it != set.pending.end()) failed.push_back(it);
      }
      completeOnLoop(set, failed, Status{ErrorCode::kMismatch, r.error});
      return;
    }
    case ResponseKind::kOk:
      break;
  }
  if (r.op == OpType::kProcessSet) {
    changeProcessSetOnLoop(r);
    return;
  }
  std::vector<PendingOp*> ops;  // per name; nullptr: not submitted here (joined)
  std::vector<PendingMap::iterator> mine;
  ops.reserve(r.names.size());
  mine.reserve(r.names.size());
  const int64_t ts = timeline ? timeline::Timeline::now() : 0;
  for (const auto& name : r.names) {
    auto it = set.pending.find(name);
    if (it == set.pending.end()) {
      // Only a joined rank takes part in an operation it did not submit
      // (and every rank in a barrier: it completes with the joined ones).
      KOLO_ENFORCE(set.joined[set.identity.rank] || r.op == OpType::kBarrier,
                   set.prefixed("response for '" + name + "' that this rank never submitted"));
      ops.push_back(nullptr);
    } else {
      ops.push_back(&it->second);
      mine.push_back(it);
      if (it->second.traced && it->second.span == PendingOp::Span::kQueue) {
        timeline->end(it->second.row, timeline::kQueue, ts);
        it->second.span = PendingOp::Span::kNone;
      }
    }
  }
  const comm::cuda::GpuFence fence = set.executor->execute(r, ops);
  if (cacheOnLoop(set) && ResponseCache::cacheable(r.op)) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      if (fromCache) {
        // An op answered from the cache holds its entry's bit.
        const int bit = ops[i] != nullptr && ops[i]->bit >= 0 ? ops[i]->bit
                                                              : set.cache.bitOf(r.names[i]);
        if (bit >= 0) set.cache.touch(bit);
      } else {
        int evicted = -1;
        set.cache.put(singleResponse(r, i), &evicted);
        if (evicted >= 0) set.evictedThisCycle.push_back(evicted);
      }
    }
  }
  if (fence.id != 0) {
    handOffOnLoop(set, mine, fence);
  } else {
    completeOnLoop(set, mine, Status::Ok());
  }
}

namespace {

// The second stage of a CUDA response's ops, run by the GPU path's
// completion thread once the GPU finished (or failed) their work.
struct GpuCompletion {
  std::vector<std::function<void(const Status&)>> onDone;  // keep the tensors alive until now
  std::vector<std::shared_ptr<HandleState>> handles;
  std::vector<std::string> names;  // for a callback that throws
};

}  // namespace

void Engine::Impl::handOffOnLoop(ProcessSetState& set,
                                 const std::vector<PendingMap::iterator>& ops,
                                 const comm::cuda::GpuFence& fence) {
  auto done = std::make_shared<GpuCompletion>();
  done->onDone.reserve(ops.size());
  done->handles.reserve(ops.size());
  // Negotiation is over for them: their names are free for the next step.
  releaseOnLoop(set, ops);
  for (const auto& it : ops) {
    done->names.push_back(it->first);
    done->onDone.push_back(std::move(it->second.entry.onDone));
    done->handles.push_back(std::move(it->second.handle));
    set.pending.erase(it);
  }
  for (const auto& h : done->handles) h->markEnqueued(fence);
  // Wakes only waiters of stage one (waitEnqueued, or a waiter of done
  // that now polls the done event); the others sleep until done.
  for (const auto& h : done->handles) h->wakeStage();
  std::vector<int> rows;
  const char* collective = nullptr;
  if (timeline) {
    rows = set.executor->tracedRows();
    collective = set.executor->collectiveSpan();
  }
  set.executor->whenGpuDone(
      fence, [done, events = gpuEvents, log = log, tl = timeline.get(), rows = std::move(rows),
              collective, store = store, rank = identity.rank, devices = gpuDevices](
                 const Status& status, const comm::cuda::GpuPhases& phases) {
        if (!status.ok() && devices && devices->wedged()) {
          // The device did not stop after the failure and may still write
          // into the tensors: keep them (the entries' callbacks own them)
          // for good; the ops still fail.
          keepForever(std::make_shared<std::vector<std::function<void(const Status&)>>>(
              std::move(done->onDone)));
          done->onDone.clear();
        }
        for (size_t i = 0; i < done->onDone.size(); ++i) {
          if (!done->onDone[i]) continue;
          try {
            done->onDone[i](status);
          } catch (const std::exception& e) {
            log->error("completion callback for '{}' threw: {}", done->names[i], e.what());
          }
        }
        done->onDone.clear();  // drops the tensors now, not with the last handle
        for (const auto& h : done->handles) h->finish(status);
        for (const auto& h : done->handles) h->wake();
        if (status.ok() && !(phases.timed && !rows.empty())) return;
        bool first = false;
        {
          std::lock_guard<std::mutex> lock(events->mu);
          if (!status.ok()) {
            first = events->failure.ok();
            if (first) events->failure = status;
          } else {
            events->traced.push_back(GpuEvents::Phases{tl, rows, collective, phases});
          }
        }
        if (first && status.code != ErrorCode::kShutdown) {
          // The peers may see this rank's connections close before its loop
          // gets to the failure: leave them the cause (a device fault) now.
          publishAbort(*store, rank, status.message);
        }
        events->any.store(true, std::memory_order_release);
        events->queue->wake();
      });
}

void Engine::Impl::gpuEventsOnLoop() {
  Status failure;
  std::vector<GpuEvents::Phases> traced;
  {
    std::lock_guard<std::mutex> lock(gpuEvents->mu);
    gpuEvents->any.store(false, std::memory_order_relaxed);
    failure = gpuEvents->failure;
    traced.swap(gpuEvents->traced);
  }
  // GPU phases as complete spans, on the rows of the ops they served.
  for (const auto& t : traced) {
    if (!timeline || t.timeline != timeline.get()) continue;  // that timeline was stopped
    using P = comm::cuda::GpuPhases;
    const std::pair<const char*, P::Phase> spans[] = {{timeline::kWaitForData, P::kReady},
                                                      {timeline::kMemcpyIn, P::kPacked},
                                                      {t.collective, P::kReduced},
                                                      {timeline::kMemcpyOut, P::kUnpacked}};
    for (const auto& [name, phase] : spans) {
      const int64_t begin = t.phases.at[phase - 1];
      const int64_t dur = t.phases.at[phase] - begin;
      if (name == nullptr || dur <= 0) continue;
      for (int row : t.rows) timeline->complete(row, name, begin, dur);
    }
  }
  // The loop's failure path names the rank (diagnoseFailure) and fails
  // everything, as for a failure of a CPU collective.
  failure.throwIfError();
}

void Engine::Impl::releaseOnLoop(ProcessSetState& set,
                                 const std::vector<PendingMap::iterator>& ops) {
  std::vector<const std::string*> names;
  names.reserve(ops.size());
  const int64_t ts = timeline ? timeline::Timeline::now() : 0;
  for (const auto& it : ops) {
    if (timeline && it->second.traced) traceCloseOnLoop(it->second, ts);
    names.push_back(&it->first);
  }
  queue.release(set.id, names);
  // Whoever waits on these handles sees counters that include their work.
  publishStatsOnLoop();
}

void Engine::Impl::completeOnLoop(ProcessSetState& set,
                                  const std::vector<PendingMap::iterator>& ops,
                                  const Status& status) {
  if (ops.empty()) return;
  // Names are free again before anyone wakes, so a waiter may reuse them.
  releaseOnLoop(set, ops);
  std::vector<std::shared_ptr<HandleState>> handles;
  handles.reserve(ops.size());
  for (const auto& it : ops) {
    if (auto& onDone = it->second.entry.onDone) {
      try {
        onDone(status);
      } catch (const std::exception& e) {
        log->error("completion callback for '{}' threw: {}", it->first, e.what());
      }
    }
    handles.push_back(std::move(it->second.handle));
    set.pending.erase(it);  // the op is gone from here on
  }
  // Every handle is done before the first waiter wakes (see finish).
  for (const auto& h : handles) h->finish(status);
  for (const auto& h : handles) h->wake();
}

void Engine::Impl::failSetOnLoop(ProcessSetState& set, const Status& status) {
  for (auto& op : set.fresh) {
    std::string name = op.msg.request.name;
    set.pending.emplace(std::move(name), std::move(op));
  }
  set.fresh.clear();
  std::vector<PendingMap::iterator> all;
  all.reserve(set.pending.size());
  for (auto it = set.pending.begin(); it != set.pending.end(); ++it) all.push_back(it);
  completeOnLoop(set, all, status);
  table.setJoined(set.id, false);
}

void Engine::Impl::failAllOnLoop(const Status& status) {
  queue.close(status);
  if (status.code != ErrorCode::kShutdown) {
    // GPU work in flight stops (its communicator is aborted) and its ops
    // fail with this status instead of waiting out KOLO_TIMEOUT.
    for (auto& [id, set] : sets) {
      if (set->executor) set->executor->abortGpu(status);
    }
  }
  if (gpuDevices && gpuDevices->wedged()) keepCudaTensorsOnLoop();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (status.code != ErrorCode::kShutdown) failure = status;
  }
  // Ops drained but not routed yet (a stop in set 0's cycle), then the
  // ones still queued.
  std::vector<PendingOp> queued;
  queue.drainInto(queued);
  for (auto* batch : {&drained, &queued}) {
    for (auto& op : *batch) {
      auto it = sets.find(op.msg.request.processSet);
      if (it != sets.end()) {
        it->second->fresh.push_back(std::move(op));
      } else {
        failUnroutedOnLoop(op, status);
      }
    }
  }
  drained.clear();
  for (auto& [id, set] : sets) failSetOnLoop(*set, status);
  publishStatsOnLoop();
}

void Engine::Impl::keepCudaTensorsOnLoop() {
  // The device did not stop after the abort: any CUDA tensor an op still
  // holds may be written yet, so its entry (what keeps it alive) is kept
  // for good instead of released with the failure. The ops still fail.
  log->error("the GPU did not stop within the drain limit after the failure; kolo keeps the "
             "tensors of its CUDA operations alive (leaked) instead of freeing memory the "
             "device may still write");
  auto keep = [](PendingOp& op) {
    if (op.msg.request.device != DeviceKind::kCuda || !op.entry.onDone) return;
    keepForever(std::make_shared<std::function<void(const Status&)>>(std::move(op.entry.onDone)));
    op.entry.onDone = nullptr;
  };
  for (auto& op : drained) keep(op);
  for (auto& [id, set] : sets) {
    for (auto& op : set->fresh) keep(op);
    for (auto& [name, op] : set->pending) keep(op);
  }
}

EngineStats Engine::Impl::totalStatsOnLoop() const {
  EngineStats total = retiredStats;
  for (const auto& [id, set] : sets) {
    const EngineStats& s = set->stats;
    if (id == 0) total.cycles = s.cycles;
    total.coordinatorRounds += s.coordinatorRounds;
    total.cachedResponses += s.cachedResponses;
    total.responses += s.responses;
    total.fusedTensors += s.fusedTensors;
    total.backendCalls += s.backendCalls;
    total.bytesReduced += s.bytesReduced;
    total.stallChecks += s.stallChecks;
  }
  return total;
}

void Engine::Impl::publishStatsOnLoop() {
  EngineStats total = totalStatsOnLoop();
  std::lock_guard<std::mutex> lock(mu);
  publishedStats = total;
  for (const auto& [id, set] : sets) publishedSetStats[id] = set->stats;
}

}  // namespace kolo
