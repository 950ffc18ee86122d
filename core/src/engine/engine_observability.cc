// Engine: autotuning, stall checks and the timeline (loop thread).
#include "engine/engine_impl.h"

namespace kolo {

// ---------------------------------------------------------------------------
// Autotuning, stall checks and the timeline (loop thread).

void Engine::Impl::applyTunedOnLoop(const autotune::Decision& d) {
  // The controller already switched `tunables` (and emptied the cache when
  // it went off) at this cycle on every rank.
  proposal.reset();
  comm::Collectives& plane = executor->collectives();
  if (plane.canSwitchTwoLevelAllreduce()) plane.setTwoLevelAllreduce(tunables.hierarchicalAllreduce);
  log->debug("tunables at cycle {}: fusion threshold {} B, cycle time {} us, cache {}, allreduce {}{}",
             loopStats.cycles, tunables.fusionThresholdBytes, tunables.cycleTime.count(),
             tunables.cacheEnabled ? "on" : "off",
             tunables.hierarchicalAllreduce ? "two-level" : "flat",
             d.final ? " (autotune done)" : "");
  if (tuner) tuner->onApplied(d, std::chrono::steady_clock::now(), loopStats.bytesReduced);
  std::lock_guard<std::mutex> lock(mu);
  tuningState.current = tunables;
  tuningState.history.push_back({loopStats.cycles, tunables});
  tuningState.converged = tuningState.converged || d.final;
}

bool Engine::Impl::stallRoundOnLoop() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<PendingAge> mine;
  mine.reserve(pending.size());
  for (const auto& [name, op] : pending) {
    if (op.msg.request.op == OpType::kJoin) continue;  // waiting for others is its job
    mine.push_back(
        {name, std::chrono::duration_cast<std::chrono::milliseconds>(now - op.enqueued).count()});
  }
  ++loopStats.stallChecks;
  StallReport report = stall.runRound(controller->channel(), mine, joined);
  if (!report.warning.empty()) log->warn("{}", report.warning);
  if (!report.shutdown) return false;
  log->error("{}", report.shutdownMessage);
  failAllOnLoop(Status{ErrorCode::kTimeout, report.shutdownMessage});
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
    for (auto& [name, op] : pending) {
      if (op.traced) traceCloseOnLoop(op, ts);
    }
    timeline->close();
  }
  for (auto& [name, op] : pending) op.traced = false;
  timeline = std::move(next);
  executor->setTimeline(timeline.get());
  {
    std::lock_guard<std::mutex> lock(timelineMu);
    timelineApplied = ticket;
  }
  timelineCv.notify_all();
}

void Engine::Impl::traceAdmitOnLoop(PendingOp& op) {
  const int64_t enqueued = std::chrono::duration_cast<std::chrono::microseconds>(
                               op.enqueued.time_since_epoch())
                               .count();
  op.traced = true;
  op.row = timeline->rowOf(op.msg.request.name);
  op.span = PendingOp::Span::kNegotiate;
  timeline->begin(op.row, timeline::opSpanName(op.msg.request.op), enqueued);
  timeline->begin(op.row, timeline::kNegotiate, enqueued);
  // Admitted ops are announced (cache bit or request) in this cycle.
  timeline->instant(op.row, timeline::kReady, timeline::Timeline::now());
}

void Engine::Impl::traceNegotiatedOnLoop(const std::vector<Response>& responses) {
  const int64_t ts = timeline::Timeline::now();
  for (const auto& r : responses) {
    for (const auto& name : r.names) {
      auto it = pending.find(name);
      if (it == pending.end()) continue;
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
