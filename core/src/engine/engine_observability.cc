// Engine: autotuning, stall checks and the timeline (the cycles' thread).
#include "engine/engine_impl.h"

namespace kolo {

// ---------------------------------------------------------------------------
// Autotuning, stall checks and the timeline (the cycles' thread).

void Engine::Impl::applyTunedOnLoop(const autotune::Decision& d) {
  // The controller already switched `tunables` (and emptied the cache when
  // it went off) at this cycle on every rank.
  proposal.reset();
  const EngineStats total = totalStatsOnLoop();
  // Flat or two-level allreduce: every set whose plane can switch follows.
  for (auto& [id, set] : sets) {
    comm::Collectives& plane = set->executor->collectives();
    if (plane.canSwitchTwoLevelAllreduce()) {
      plane.setTwoLevelAllreduce(tunables.hierarchicalAllreduce);
    }
  }
  log->debug("tunables at cycle {}: fusion threshold {} B, cycle time {} us, cache {}, allreduce {}{}",
             total.cycles, tunables.fusionThresholdBytes, tunables.cycleTime.count(),
             tunables.cacheEnabled ? "on" : "off",
             tunables.hierarchicalAllreduce ? "two-level" : "flat",
             d.final ? " (autotune done)" : "");
  if (tuner) tuner->onApplied(d, std::chrono::steady_clock::now(), total.bytesReduced);
  if (!tunables.cacheEnabled) {
    // Set 0's controller emptied its cache; the other sets empty theirs
    // here, before their next cycle (the same point on all their members).
    for (auto& [id, set] : sets) {
      if (id == 0) continue;
      for (int b = 0; b < set->cache.capacity(); ++b) {
        if (set->cache.occupied(b)) {
          set->evictedThisCycle.push_back(b);
          set->cache.erase(b);
        }
      }
      revertEvictedOnLoop(*set, set->evictedThisCycle);
      set->evictedThisCycle.clear();
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  tuningState.current = tunables;
  tuningState.history.push_back({total.cycles, tunables});
  tuningState.converged = tuningState.converged || d.final;
}

bool Engine::Impl::stallRoundOnLoop(ProcessSetState& set) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<PendingAge> mine;
  mine.reserve(set.pending.size());
  for (const auto& [name, op] : set.pending) {
    if (op.msg.request.op == OpType::kJoin) continue;  // waiting for others is its job
    const Request& q = op.msg.request;
    mine.push_back(
        {name, std::chrono::duration_cast<std::chrono::milliseconds>(now - op.enqueued).count(),
         q.call.empty() ? std::string() : describeCall(q)});
  }
  ++set.stats.stallChecks;
  StallReport report = set.stall.runRound(set.controller->channel(), mine, set.joined);
  if (!report.warning.empty()) log->warn("{}", report.warning);
  if (!report.shutdown) return true;
  log->error("{}", report.shutdownMessage);
  const Status status{ErrorCode::kTimeout, report.shutdownMessage};
  if (set.id == 0) {
    // Every rank got this report in this round: all stop here together.
    failAllOnLoop(status);
    return false;
  }
  if (!set.key.empty()) {
    // A local set: only its members got it, and they all end the set here
    // (its cycle's caller removes it); the engine and its other sets go on.
    // Gone from the table first: a caller that sees its op fail finds the
    // set gone too.
    table.end(set.id, status);
    failSetOnLoop(set, status);
    set.ended = true;
    return true;
  }
  // Only the set's members got it. They fail, and end the job through an
  // abort, which set 0's next cycle tells every rank about (ranks outside
  // the set must not wait for them).
  failAllOnLoop(status);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (abortMessage.empty()) abortMessage = report.shutdownMessage;
  }
  publishAbort(*store, identity.rank, report.shutdownMessage);
  abortRequested = true;
  return true;
}

void Engine::Impl::applyTimelineOnLoop() {
  std::unique_ptr<timeline::Timeline> next;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(timelineMu);
    next = std::move(timelineNext);
    ticket = timelineRequested;
    timelineChange = false;
  }
  if (timeline) {
    // Spans still open end here, so the old file has no dangling ones.
    const int64_t ts = timeline::Timeline::now();
    for (auto& [id, set] : sets) {
      for (auto& [name, op] : set->pending) {
        if (op.traced) traceCloseOnLoop(op, ts);
      }
    }
    timeline->close();
  }
  for (auto& [id, set] : sets) {
    for (auto& [name, op] : set->pending) op.traced = false;
  }
  timeline = std::move(next);
  for (auto& [id, set] : sets) set->executor->setTimeline(timeline.get());
  {
    std::lock_guard<std::mutex> lock(timelineMu);
    timelineApplied = ticket;
  }
  timelineCv.notify_all();
}

void Engine::Impl::traceAdmitOnLoop(ProcessSetState& set, PendingOp& op) {
  const int64_t enqueued = std::chrono::duration_cast<std::chrono::microseconds>(
                               op.enqueued.time_since_epoch())
                               .count();
  op.traced = true;
  // Names are per set: another set's rows carry its id. Requests made by
  // another API's call are named by a sequence number, a new name per call:
  // they get a row per call kind instead ("all_reduce(op=SUM)").
  const Request& q = op.msg.request;
  const std::string& key = q.call.empty() ? q.name : q.call;
  op.row = timeline->rowOf(set.id == 0 ? key
                                       : key + " [process set " + std::to_string(set.id) + "]");
  op.span = PendingOp::Span::kNegotiate;
  if (q.call.empty()) {
    timeline->begin(op.row, timeline::opSpanName(q.op), enqueued);
  } else {
    timeline->beginNamed(op.row, timeline::opSpanName(q.op), enqueued, q.name);
  }
  timeline->begin(op.row, timeline::kNegotiate, enqueued);
  // Admitted ops are announced (cache bit or request) in this cycle.
  timeline->instant(op.row, timeline::kReady, timeline::Timeline::now());
}

void Engine::Impl::traceNegotiatedOnLoop(ProcessSetState& set,
                                         const std::vector<Response>& responses) {
  const int64_t ts = timeline::Timeline::now();
  for (const auto& r : responses) {
    for (const auto& name : r.names) {
      auto it = set.pending.find(name);
      if (it == set.pending.end()) continue;
      PendingOp& op = it->second;
      if (!op.traced || op.span != PendingOp::Span::kNegotiate) continue;
      timeline->end(op.row, timeline::kNegotiate, ts);
      timeline->begin(op.row, timeline::kQueue, ts);
      op.span = PendingOp::Span::kQueue;
    }
  }
}

void Engine::Impl::traceCloseOnLoop(PendingOp& op, int64_t ts) {
  if (op.span == PendingOp::Span::kNegotiate) timeline->end(op.row, timeline::kNegotiate, ts);
  if (op.span == PendingOp::Span::kQueue) timeline->end(op.row, timeline::kQueue, ts);
  timeline->end(op.row, timeline::opSpanName(op.msg.request.op), ts);
  op.span = PendingOp::Span::kNone;
  op.traced = false;
}

}  // namespace kolo
