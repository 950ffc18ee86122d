// Engine::Impl: the state behind kolo::Engine, shared by engine.cc (caller
// side), engine_loop.cc (the background loop) and engine_observability.cc
// (autotuning, stall checks, timeline). Methods ending in OnLoop run on the
// background thread only.
#pragma once

#include "kolo/engine.h"

#include <atomic>
#include <condition_variable>
#include <optional>
#include <thread>
#include <unordered_map>

#include "autotune/autotuner.h"
#include "comm/select.h"
#include "negotiation/controller.h"
#include "execution/executor.h"
#include "engine/failure.h"
#include "common/logging.h"
#include "kolo/tcp_store.h"
#include "engine/request_check.h"
#include "negotiation/stall_inspector.h"
#include "engine/tensor_queue.h"
#include "timeline/timeline.h"

namespace kolo {

struct Engine::Impl {
  Impl(Config c, Identity id, std::shared_ptr<Store> s);

  Handle push(std::vector<PendingOp> ops);
  void stopAndJoin();

  // Hands a timeline (or nullptr: stop) to the loop and waits until the
  // loop switched to it. Any thread.
  void requestTimeline(std::unique_ptr<timeline::Timeline> next);

  // --- loop thread only (…OnLoop) ---
  void loopOnLoop();
  void cyclesOnLoop();
  void finishOnLoop();
  using PendingMap = std::unordered_map<std::string, PendingOp>;
  // Admits fresh ops into pending (leaving fresh empty).
  void admitOnLoop(std::vector<PendingOp>& fresh, CycleInput& in);
  void executeOnLoop(const Response& r, bool fromCache);
  // Ends ops (entries of pending) with status: frees their names, publishes
  // the counters once, runs their callbacks, wakes their waiters and drops
  // them from pending.
  void completeOnLoop(const std::vector<PendingMap::iterator>& ops, const Status& status);
  void failAllOnLoop(const Status& status);
  void revertEvictedOnLoop(const std::vector<int>& bits);
  bool cacheOnLoop() const { return cache.enabled() && tunables.cacheEnabled; }
  void applyTunedOnLoop(const autotune::Decision& d);
  // Runs the stall check round; true when it ended the job.
  bool stallRoundOnLoop();
  void applyTimelineOnLoop();
  void traceAdmitOnLoop(PendingOp& op);
  void traceNegotiatedOnLoop(const std::vector<Response>& responses);
  void traceCloseOnLoop(PendingOp& op, int64_t ts);

  Config config;
  Identity identity;
  std::shared_ptr<Store> rootStore;  // unprefixed: arrival and failure keys
  std::shared_ptr<Store> store;      // this engine generation's keys
  std::shared_ptr<spdlog::logger> log;

  TensorQueue queue;
  ResponseCache cache;
  EngineStats loopStats;  // loop thread
  std::unique_ptr<Controller> controller;
  std::unique_ptr<Executor> executor;

  PendingMap pending;                // loop thread
  std::vector<PendingOp> drained;    // loop thread; empty between cycles
  Tunables tunables;                                    // loop thread; see Controller
  StallInspector stall;                                 // loop thread
  std::unique_ptr<autotune::Autotuner> tuner;           // rank 0 with KOLO_AUTOTUNE
  std::optional<autotune::Decision> proposal;           // rank 0: not yet applied
  std::unique_ptr<timeline::Timeline> timeline;         // loop thread; null: off
  std::vector<int> invalidBits;                         // loop thread
  std::vector<int> evictedThisCycle;                    // loop thread
  std::vector<bool> joined;                             // loop thread
  std::thread thread;

  std::atomic<bool> shutdownRequested{false};
  std::atomic<bool> abortRequested{false};
  std::atomic<bool> localJoined{false};  // join() called, not yet completed

  // Timeline hand-off from any thread to the loop.
  std::mutex timelineMu;
  std::condition_variable timelineCv;
  std::unique_ptr<timeline::Timeline> timelineNext;  // guarded by timelineMu
  uint64_t timelineRequested = 0;                    // guarded by timelineMu
  uint64_t timelineApplied = 0;                      // guarded by timelineMu
  bool loopDone = false;  // guarded by timelineMu: the loop left for good
  std::atomic<bool> timelineChange{false};
  std::atomic<std::thread::id> loopThreadId{};

  std::mutex joinMu;  // serialises joining the loop thread
  bool joinedThread = false;

  mutable std::mutex mu;  // guards the fields below
  std::string abortMessage;
  EngineStats publishedStats;
  Status failure;
  TuningState tuningState;
};

}  // namespace kolo
