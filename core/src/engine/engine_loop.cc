// Engine's background loop: drain, negotiate, execute, complete (loop thread).
#include <algorithm>

#include "engine/engine_impl.h"

namespace kolo {

// ---------------------------------------------------------------------------
// Background loop.

void Engine::Impl::loopOnLoop() {
  loopThreadId = std::this_thread::get_id();
  cyclesOnLoop();
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
  if (executor) executor->setTimeline(nullptr);
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
  int idleCycles = 0;  // cycles in a row with nothing pending here
  while (true) {
    // An idle rank backs off (2, 4, 8, 16 cycle times) instead of spending
    // ~3% of a core on empty cycles; new work still wakes it at once, and a
    // peer with work waits for it in the control allreduce without spinning.
    queue.waitForWork(cycleStart + tunables.cycleTime * (1 << std::min(idleCycles, 4)));
    cycleStart = std::chrono::steady_clock::now();
    if (timelineChange.load(std::memory_order_acquire)) applyTimelineOnLoop();
    CycleInput in;
    queue.drainInto(drained);
    admitOnLoop(drained, in);
    in.shutdown = shutdownRequested.load();
    in.abort = abortRequested.load();
    if (in.abort) {
      std::lock_guard<std::mutex> lock(mu);
      in.abortMessage = abortMessage;
    }
    if (identity.rank == 0) {
      in.stallCheckDue = stall.checkDue(cycleStart);
      in.tune = proposal;
    }
    try {
      CycleOutput out = controller->runCycle(in);
      for (auto& [name, op] : pending) {
        if (op.state == PendingOp::State::kNew) op.state = PendingOp::State::kSent;
      }
      if (out.stop) {
        failAllOnLoop(stopStatus(out.stopInfo, identity.rank));
        return;
      }
      if (out.tuned) applyTunedOnLoop(*out.tuned);
      revertEvictedOnLoop(out.evictedBits);
      if (timeline) {
        traceNegotiatedOnLoop(out.cached);
        traceNegotiatedOnLoop(out.uncached);
        if (!out.cached.empty() || !out.uncached.empty()) {
          timeline->markCycle(timeline::Timeline::now());
        }
      }
      for (const auto& r : out.cached) executeOnLoop(r, true);
      for (const auto& r : out.uncached) executeOnLoop(r, false);
      // Pending tensors whose cache entries were just replaced negotiate again.
      revertEvictedOnLoop(evictedThisCycle);
      evictedThisCycle.clear();
      if (out.stallCheck && stallRoundOnLoop()) return;
      const bool idle = pending.empty() && out.cached.empty() && out.uncached.empty();
      idleCycles = idle ? idleCycles + 1 : 0;
      if (tuner) {
        if (auto d = tuner->onCycle(std::chrono::steady_clock::now(), loopStats.bytesReduced)) {
          proposal = d;
        }
      }
    } catch (const std::exception& e) {
      Status s = diagnoseFailure(e, *store, identity, config.timeout);
      log->error("{}", s.message);
      failAllOnLoop(s);
      // Closing our connections makes peers blocked on us fail promptly.
      executor.reset();
      controller.reset();
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    publishedStats = loopStats;
  }
}

void Engine::Impl::admitOnLoop(std::vector<PendingOp>& fresh, CycleInput& in) {
  // Group members arrive in one drain (pushed atomically); a group uses the
  // cache only when every member hits.
  std::unordered_map<std::string, bool> groupAllHit;
  for (auto& op : fresh) {
    const Request& q = op.msg.request;
    if (timeline) traceAdmitOnLoop(op);
    if (cacheOnLoop() && ResponseCache::cacheable(q.op)) {
      int bit = -1;
      switch (cache.lookup(q, &bit)) {
        case ResponseCache::Lookup::kHit:
          op.state = PendingOp::State::kCached;
          op.bit = bit;
          break;
        case ResponseCache::Lookup::kChanged:
          invalidBits.push_back(bit);
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
  for (auto& op : fresh) {
    if (!op.msg.group.empty() && !groupAllHit[op.msg.group]) {
      op.state = PendingOp::State::kNew;
      op.bit = -1;
    }
    std::string name = op.msg.request.name;
    pending.emplace(std::move(name), std::move(op));
  }
  fresh.clear();  // keeps its capacity for the next drain
  for (auto& [name, op] : pending) {
    if (op.state == PendingOp::State::kCached) in.readyBits.push_back(op.bit);
    if (op.state == PendingOp::State::kNew) in.uncached.push_back(op.msg);
  }
  in.invalidBits.swap(invalidBits);
  in.joined = joined[identity.rank];
}

void Engine::Impl::revertEvictedOnLoop(const std::vector<int>& bits) {
  if (bits.empty()) return;
  std::vector<bool> evicted(static_cast<size_t>(cache.capacity()), false);
  for (int bit : bits) evicted[bit] = true;
  for (auto& [name, op] : pending) {
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

void Engine::Impl::executeOnLoop(const Response& r, bool fromCache) {
  switch (r.kind) {
    case ResponseKind::kJoinAck:
      joined[r.rankArg] = true;
      return;
    case ResponseKind::kJoinDone: {
      std::fill(joined.begin(), joined.end(), false);
      auto it = pending.find(kJoinName);
      KOLO_ENFORCE(it != pending.end(), "join completed but this rank never joined");
      {
        std::lock_guard<std::mutex> lock(it->second.handle->mu);
        it->second.handle->joinResult = r.rankArg;
      }
      localJoined = false;
      completeOnLoop({it}, Status::Ok());
      return;
    }
    case ResponseKind::kError: {
      std::vector<PendingMap::iterator> failed;
      for (const auto& name : r.names) {
        auto it = pending.find(name);
        if (it != pending.end()) failed.push_back(it);
      }
      completeOnLoop(failed, Status{ErrorCode::kMismatch, r.error});
      return;
    }
    case ResponseKind::kOk:
      break;
  }
  std::vector<PendingOp*> ops;  // per name; nullptr: not submitted here (joined)
  std::vector<PendingMap::iterator> mine;
  ops.reserve(r.names.size());
  mine.reserve(r.names.size());
  const int64_t ts = timeline ? timeline::Timeline::now() : 0;
  for (const auto& name : r.names) {
    auto it = pending.find(name);
    if (it == pending.end()) {
      KOLO_ENFORCE(joined[identity.rank] || r.op == OpType::kBarrier,
                   "response for '" + name + "' that this rank never submitted");
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
  executor->execute(r, ops);
  if (cacheOnLoop() && ResponseCache::cacheable(r.op)) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      if (fromCache) {
        // An op answered from the cache holds its entry's bit.
        const int bit = ops[i] != nullptr && ops[i]->bit >= 0 ? ops[i]->bit
                                                              : cache.bitOf(r.names[i]);
        if (bit >= 0) cache.touch(bit);
      } else {
        int evicted = -1;
        cache.put(singleResponse(r, i), &evicted);
        if (evicted >= 0) evictedThisCycle.push_back(evicted);
      }
    }
  }
  completeOnLoop(mine, Status::Ok());
}

void Engine::Impl::completeOnLoop(const std::vector<PendingMap::iterator>& ops,
                                  const Status& status) {
  if (ops.empty()) return;
  std::vector<const std::string*> names;
  names.reserve(ops.size());
  const int64_t ts = timeline ? timeline::Timeline::now() : 0;
  for (const auto& it : ops) {
    if (timeline && it->second.traced) traceCloseOnLoop(it->second, ts);
    names.push_back(&it->first);
  }
  // Names are free again before anyone wakes, so a waiter may reuse them.
  queue.release(names);
  {
    // Whoever waits on these handles sees counters that include their work.
    std::lock_guard<std::mutex> lock(mu);
    publishedStats = loopStats;
  }
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
    pending.erase(it);  // the op is gone from here on
  }
  // Every handle is done before the first waiter wakes (see finish).
  for (const auto& h : handles) h->finish(status);
  for (const auto& h : handles) h->wake();
}

void Engine::Impl::failAllOnLoop(const Status& status) {
  queue.close(status);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (status.code != ErrorCode::kShutdown) failure = status;
    publishedStats = loopStats;
  }
  queue.drainInto(drained);
  for (auto& op : drained) pending.emplace(op.msg.request.name, std::move(op));
  drained.clear();
  std::vector<PendingMap::iterator> all;
  all.reserve(pending.size());
  for (auto it = pending.begin(); it != pending.end(); ++it) all.push_back(it);
  completeOnLoop(all, status);
  localJoined = false;
}

}  // namespace kolo
