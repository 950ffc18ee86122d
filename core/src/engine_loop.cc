// Engine's background loop: drain, negotiate, execute, complete (loop thread).
#include <algorithm>

#include "engine_impl.h"

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
    admitOnLoop(queue.drain(), in);
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

void Engine::Impl::admitOnLoop(std::vector<PendingOp> fresh, CycleInput& in) {
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
  Response single;
  single.kind = r.kind;
  single.op = r.op;
  single.dtype = r.dtype;
  single.device = r.device;
  single.reduceOp = r.reduceOp;
  single.prescale = r.prescale;
  single.postscale = r.postscale;
  single.root = r.root;
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
      completeOnLoop(it->second, Status::Ok());
      return;
    }
    case ResponseKind::kError:
      for (const auto& name : r.names) {
        auto it = pending.find(name);
        if (it != pending.end()) completeOnLoop(it->second, Status{ErrorCode::kMismatch, r.error});
      }
      return;
    case ResponseKind::kOk:
      break;
  }
  std::vector<PendingOp*> ops;
  ops.reserve(r.names.size());
  const int64_t ts = timeline ? timeline::Timeline::now() : 0;
  for (const auto& name : r.names) {
    auto it = pending.find(name);
    if (it == pending.end()) {
      KOLO_ENFORCE(joined[identity.rank] || r.op == OpType::kBarrier,
                   "response for '" + name + "' that this rank never submitted");
      ops.push_back(nullptr);
    } else {
      ops.push_back(&it->second);
      if (it->second.traced && it->second.span == PendingOp::Span::kQueue) {
        timeline->end(it->second.row, timeline::kQueue, ts);
        it->second.span = PendingOp::Span::kNone;
      }
    }
  }
  executor->execute(r, ops);
  for (size_t i = 0; i < r.names.size(); ++i) {
    if (cacheOnLoop() && ResponseCache::cacheable(r.op)) {
      if (fromCache) {
        int bit = cache.bitOf(r.names[i]);
        if (bit >= 0) cache.touch(bit);
      } else {
        int evicted = -1;
        cache.put(singleResponse(r, i), &evicted);
        if (evicted >= 0) evictedThisCycle.push_back(evicted);
      }
    }
    if (ops[i] != nullptr) completeOnLoop(*ops[i], Status::Ok());
  }
}

void Engine::Impl::completeOnLoop(PendingOp& op, const Status& status) {
  if (timeline && op.traced) traceCloseOnLoop(op, timeline::Timeline::now());
  std::string name = op.msg.request.name;
  auto handle = op.handle;
  auto onDone = std::move(op.entry.onDone);
  pending.erase(name);  // op is gone from here on
  queue.release(name);
  {
    // Whoever waits on this handle sees counters that include its work.
    std::lock_guard<std::mutex> lock(mu);
    publishedStats = loopStats;
  }
  if (onDone) {
    try {
      onDone(status);
    } catch (const std::exception& e) {
      log->error("completion callback for '{}' threw: {}", name, e.what());
    }
  }
  handle->complete(status);
}

void Engine::Impl::failAllOnLoop(const Status& status) {
  queue.close(status);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (status.code != ErrorCode::kShutdown) failure = status;
    publishedStats = loopStats;
  }
  for (auto& op : queue.drain()) pending.emplace(op.msg.request.name, std::move(op));
  while (!pending.empty()) completeOnLoop(pending.begin()->second, status);
  localJoined = false;
}

}  // namespace kolo
