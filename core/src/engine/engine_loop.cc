// Engine's cycles: drain, negotiate, execute, complete. Who runs them (the
// background loop thread, or a waiting caller) is engine_threads.cc.
//
// One iteration (iterateOnLoop) runs one negotiation cycle of every
// process set this rank belongs to, set 0 first, then the others in
// increasing id. Every member of a set therefore runs that set's cycles in
// the same sequence, interleaved with the other sets' in one global order
// ((iteration, install order)), which keeps the sets deadlock-free among each other;
// a rank never runs the cycles of a set it is not in.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/bounded_call.h"
#include "engine/engine_impl.h"

namespace kolo {

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
    // Only set 0's cycle (above) adds or removes sets (and a stall ends a
    // local set at the end of its own cycle). They run in install order,
    // which every member of two sets shares: for sets every rank adds it is
    // their id's.
    cycleIds.clear();
    for (const auto& [id, set] : sets) {
      if (id != 0) cycleIds.emplace_back(set->order, id);
    }
    std::sort(cycleIds.begin(), cycleIds.end());
    for (const auto& [order, id] : cycleIds) {
      auto it = sets.find(id);
      if (!cycleOnLoop(*it->second, cycleStart, busy)) return Iteration::kEnded;
      if (it->second->ended) {
        const std::string label = it->second->label;
        retireSetOnLoop(it, Status{ErrorCode::kInvalidArgument, label + " was ended by a stall"});
      }
    }
    if (tuner) {
      if (auto d = tuner->onCycle(std::chrono::steady_clock::now(),
                                  totalStatsOnLoop().bytesReduced)) {
        proposal = d;
      }
    }
  } catch (const std::exception& e) {
    // A peer learns of a failure only from the peers it talks to (rings,
    // trees, recursive doubling), so those blocked on this rank must fail
    // now: then each reaches its own diagnosis while this one still waits
    // for it to say it is alive, instead of being named as a rank that
    // stopped responding.
    abandonConnectionsOnLoop(e.what());
    Status s = diagnoseFailure(e, *store, identity, config.timeout);
    log->error("{}", s.message);
    failAllOnLoop(s);
    sets.clear();
    return Iteration::kEnded;
  }
  publishStatsOnLoop();
  return Iteration::kDone;
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
    // Removed after this op was queued (the caller checked it existed), or
    // ended by a stall meanwhile (then the op fails as the set's did).
    const std::string what = "'" + op.msg.request.name + "'";
    failUnroutedOnLoop(op, table.endedBy(id, what)
                               .value_or(Status{ErrorCode::kInvalidArgument,
                                                what + ": process set " + std::to_string(id) +
                                                    " was removed before this operation ran"}));
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
    // A device failure recorded before the shutdown was asked for (its
    // caller saw the op fail, then shut down) is this rank's failure, not a
    // clean shutdown: the loop fails on it (the peers learn the cause)
    // instead of telling them this rank shut down. Read after the request:
    // the failure is recorded before the caller can see it.
    if (in.shutdown && gpuEvents->any.load(std::memory_order_acquire)) gpuEventsOnLoop();
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
  if (r.op == OpType::kBroadcast) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      if (wire::isMessageName(r.names[i]) && set.pending.count(r.names[i]) == 0) {
        receiveOnLoop(set, r, i);
      }
    }
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
  std::vector<std::pair<std::string, std::function<void(void*)>>> enqueuedNotices;
  for (const auto& it : ops) {
    if (it->second.entry.onEnqueued) {
      enqueuedNotices.emplace_back(it->first, std::move(it->second.entry.onEnqueued));
    }
    done->names.push_back(it->first);
    done->onDone.push_back(std::move(it->second.entry.onDone));
    done->handles.push_back(std::move(it->second.handle));
    set.pending.erase(it);
  }
  for (const auto& h : done->handles) h->markEnqueued(fence);
  // The adapters' notice of stage one (Entry::onEnqueued), before any
  // waiter of it wakes.
  for (const auto& it : enqueuedNotices) {
    try {
      it.second(fence.doneEvent.get());
    } catch (const std::exception& e) {
      log->error("enqueued callback for '{}' threw: {}", it.first, e.what());
    }
  }
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
        // A failure is the engine's before it is the caller's: a caller
        // that sees its op fail and shuts down at once must find the
        // failure recorded (the loop fails on it rather than telling the
        // peers of a clean shutdown) and the cause left for the peers.
        const bool traced = status.ok() && phases.timed && !rows.empty();
        if (!status.ok() || traced) {
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
            // The peers may see this rank's connections close before its
            // loop gets to the failure: leave them the cause (a device
            // fault) now.
            publishAbort(*store, rank, status.message);
          }
          events->any.store(true, std::memory_order_release);
        }
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
        if (!status.ok() || traced) events->queue->wake();
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

void Engine::Impl::abandonConnectionsOnLoop(const std::string& why) {
  const std::string text = "closed after an earlier failure on this rank: " + why;
  for (auto& [id, set] : sets) {
    if (set->controller) set->controller->channel().abandon(text);
    if (set->executor) set->executor->collectives().abandon(text);
  }
}

void Engine::Impl::failAllOnLoop(const Status& status) {
  queue.close(status);
  for (auto& receive : mailbox.takeReceives()) failReceive(receive, status);
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
    addCounters(total, s);
  }
  return total;
}

void Engine::Impl::addCounters(EngineStats& into, const EngineStats& from) {
  into.coordinatorRounds += from.coordinatorRounds;
  into.cachedResponses += from.cachedResponses;
  into.responses += from.responses;
  into.fusedTensors += from.fusedTensors;
  into.backendCalls += from.backendCalls;
  into.bytesReduced += from.bytesReduced;
  into.stallChecks += from.stallChecks;
}

void Engine::Impl::publishStatsOnLoop() {
  EngineStats total = totalStatsOnLoop();
  std::lock_guard<std::mutex> lock(mu);
  publishedStats = total;
  for (const auto& [id, set] : sets) publishedSetStats[id] = set->stats;
}

}  // namespace kolo
