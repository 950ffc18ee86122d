// Engine::Impl: the state behind kolo::Engine, shared by engine.cc (caller
// side), engine_threads.cc (who runs the cycles: the background loop thread
// or a waiting caller), engine_loop.cc (an iteration of the cycles),
// engine_sets.cc (process set changes) and engine_observability.cc (autotuning, stall checks,
// timeline). Methods ending in OnLoop run on the thread that runs the
// cycles, holding gate->mu: the background loop thread, or a caller that
// waits for its operation while the loop thread is idle (driveUntilDone).
#pragma once

#include "kolo/engine.h"

#include <atomic>
#include <condition_variable>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "autotune/autotuner.h"
#include "comm/select.h"
#include "common/logging.h"
#include "engine/failure.h"
#include "engine/mailbox.h"
#include "engine/peer_pair.h"
#include "engine/process_set.h"
#include "engine/request_check.h"
#include "engine/tensor_queue.h"
#include "execution/executor.h"
#include "execution/handle_state.h"
#include "kolo/tcp_store.h"
#include "negotiation/controller.h"
#include "negotiation/stall_inspector.h"
#include "rendezvous/peer_failure.h"
#include "timeline/timeline.h"

namespace kolo {

// What the GPU path's completion threads hand back to the loop: the first
// asynchronous failure (the loop fails the job with it) and the GPU phases
// of traced responses (the loop writes them to the timeline). Shared with
// the completion callbacks, which may outlive a cycle.
struct GpuEvents {
  struct Phases {
    const timeline::Timeline* timeline;  // the one that was running
    std::vector<int> rows;
    const char* collective;
    comm::cuda::GpuPhases phases;
  };
  std::mutex mu;
  Status failure;               // guarded by mu
  std::vector<Phases> traced;   // guarded by mu
  std::atomic<bool> any{false};  // something above is waiting for the loop
  TensorQueue* queue = nullptr;  // woken when something arrives
};

struct Engine::Impl : CallerCycles {
  Impl(Config c, Identity id, std::shared_ptr<Store> s, std::vector<std::vector<int>> staticSets);

  Handle push(std::vector<PendingOp> ops);

  // Engine::nameOrNext's counters, per (process set, op).
  std::mutex namesMu;
  std::map<std::pair<int, std::string>, uint64_t> nameCounters;  // guarded by namesMu

  void stopAndJoin();
  // What connecting a process set needs (constructor and cycles).
  ProcessSetContext processSetContext();
  // Queues an internal op of set 0 changing the process sets and waits for
  // it; returns its completed state (processSetId: the set added). name:
  // the op's name (empty: the next of the changes every rank makes).
  std::shared_ptr<HandleState> changeProcessSets(ProcessSetChange change, std::string name = "");

  // Hands a timeline (or nullptr: stop) to the loop and waits until the
  // loop switched to it. Any thread.
  void requestTimeline(std::unique_ptr<timeline::Timeline> next);

  // A caller in Handle::wait() holding gate->mu: runs iterations until s is
  // done (see there).
  void driveUntilDone(HandleState& s) override;
  // Whether this thread runs the cycles now (holds gate->mu).
  bool runningCyclesHere() const { return tCycleGateHeld == gate.get(); }

  // --- the thread running the cycles only (…OnLoop) ---
  void loopOnLoop();
  void cyclesOnLoop();
  // Every set's GPU fences opened before openedBefore get a host function
  // that reports them (GpuOps::flushSignals). Loop thread, holding the gate.
  void flushGpuSignalsOnLoop(std::chrono::steady_clock::time_point openedBefore) noexcept;
  // Before the loop thread sleeps: every fence gets its host function, so
  // none waits for a waiter that may never come. Loop thread.
  void flushGpuSignalsBeforeSleep() noexcept;
  void finishOnLoop();
  // One iteration: drain the queue, one cycle of every set, autotune.
  // onCaller: run by a waiting caller, which hands the iteration back
  // (kYield, before any cycle) when callerMayDrive() says no.
  enum class Iteration { kDone, kYield, kEnded };
  Iteration iterateOnLoop(std::chrono::steady_clock::time_point cycleStart, bool& busy,
                          bool onCaller);
  // One negotiation cycle of set (admit, negotiate, execute, stall check).
  // Returns false when this rank's loop must end (the job stopped).
  bool cycleOnLoop(ProcessSetState& set, std::chrono::steady_clock::time_point now, bool& busy);
  // Hands drained ops to their sets; ops of a set that no longer exists fail.
  // globalOnly: set 0's ops now, the others stay in ops for a second pass.
  void routeOnLoop(std::vector<PendingOp>& ops, bool globalOnly);
  // Ends an op that never reached a set (its set was removed, or the
  // engine stopped first).
  void failUnroutedOnLoop(PendingOp& op, const Status& status);
  // Admits set.fresh into set.pending.
  void admitOnLoop(ProcessSetState& set, CycleInput& in);
  void executeOnLoop(ProcessSetState& set, const Response& r, bool fromCache);
  // CUDA responses: ends ops' first stage (names free, handles enqueued with
  // the fence's done event) and hands their completion to the GPU path.
  void handOffOnLoop(ProcessSetState& set, const std::vector<PendingMap::iterator>& ops,
                     const comm::cuda::GpuFence& fence);
  // Throws the GPU path's asynchronous failure; writes traced GPU phases.
  void gpuEventsOnLoop();
  // Applies a process set change of set 0's response r (every rank, same point).
  void changeProcessSetOnLoop(const Response& r);
  // A local set's change (members only; others return at once). changed:
  // this rank's id of the set added or removed.
  Status changeLocalProcessSetOnLoop(const ProcessSetChange& change, int& changed);
  // Makes a connected set one of this rank's sets, cycled after the others.
  void installSetOnLoop(std::unique_ptr<ProcessSetState> set);
  // Point-to-point (engine_peers.cc). Whether the pair with peer is up.
  bool pairReady(int peer);
  // Asks peer through set 0 to connect the pair (pairMu held).
  void requestPairLocked(int peer, PeerPair& pair);
  // Set 0's response to a pair request: its two ranks start connecting.
  void pairRequestedOnLoop(const ProcessSetChange& change);
  // The pair's set was installed: the messages waiting for it go in.
  void pairInstalledOnLoop(const ProcessSetState& set);
  // The pair could not connect: its waiting messages fail, later sends too.
  void failPair(int peer, const Status& status);
  // A message response this rank did not submit (it receives it).
  void receiveOnLoop(ProcessSetState& set, const Response& r, size_t i);
  // Once the loop ended: receives fail, connectors are joined.
  void stopPeersAfterLoop(const Status& status);
  // Fails the set's ops with why, keeps its counters and forgets it.
  void retireSetOnLoop(std::map<int, std::unique_ptr<ProcessSetState>>::iterator it,
                       const Status& why);
  // Closes ops' timeline spans, frees their names for new operations and
  // publishes the counters (the first part of ending them).
  void releaseOnLoop(ProcessSetState& set, const std::vector<PendingMap::iterator>& ops);
  // Ends ops (entries of set.pending) with status: frees their names,
  // publishes the counters once, runs their callbacks, wakes their waiters
  // and drops them from pending.
  void completeOnLoop(ProcessSetState& set, const std::vector<PendingMap::iterator>& ops,
                      const Status& status);
  // Fails every op of set (pending and fresh) with status.
  void failSetOnLoop(ProcessSetState& set, const Status& status);
  // Fails everything and closes the queue: the engine is done.
  void failAllOnLoop(const Status& status);
  // After a backend threw: closes every set's connections at once (see
  // comm::ControlChannel::abandon), before the diagnosis that takes seconds.
  void abandonConnectionsOnLoop(const std::string& why);
  // A wedged GPU (it did not stop after an abort): the CUDA ops' entries
  // are kept for good instead of released by the failure.
  void keepCudaTensorsOnLoop();
  void revertEvictedOnLoop(ProcessSetState& set, const std::vector<int>& bits);
  bool cacheOnLoop(const ProcessSetState& set) const {
    return set.cache.enabled() && tunables.cacheEnabled;
  }
  void applyTunedOnLoop(const autotune::Decision& d);
  // Runs set's stall check round; false when it ended the job.
  bool stallRoundOnLoop(ProcessSetState& set);
  void applyTimelineOnLoop();
  void traceAdmitOnLoop(ProcessSetState& set, PendingOp& op);
  void traceNegotiatedOnLoop(ProcessSetState& set, const std::vector<Response>& responses);
  void traceCloseOnLoop(PendingOp& op, int64_t ts);
  // Sum of every set's counters (cycles: set 0's), for publishing.
  EngineStats totalStatsOnLoop() const;
  // Adds every counter of from but cycles into into (a set's counters into
  // the engine's sums).
  static void addCounters(EngineStats& into, const EngineStats& from);
  void publishStatsOnLoop();

  Config config;
  Identity identity;
  std::shared_ptr<Store> rootStore;  // unprefixed: arrival and failure keys
  std::shared_ptr<Store> store;      // this engine generation's keys
  std::string localAddress;          // how peers reach this rank
  std::vector<std::string> hosts;    // by rank: each rank's localAddress

  std::shared_ptr<spdlog::logger> log;

  TensorQueue queue;
  std::shared_ptr<GpuEvents> gpuEvents = std::make_shared<GpuEvents>();
  ProcessSetTable table;  // any thread
  Tunables tunables;      // cycles (gate->mu); see Controller
  // GPU devices of every process set (one comm stream per device).
  std::shared_ptr<comm::cuda::DeviceSet> gpuDevices = makeGpuDevices(config);

  // The cycles' state (gate->mu held; see the top of this file).
  // The sets this rank belongs to, by id (set 0 first).
  std::map<int, std::unique_ptr<ProcessSetState>> sets;
  int nextSetId = 1;              // id of the next set added
  int64_t nextOrder = 1;          // ProcessSetState::order of the next set installed
  std::vector<std::pair<int64_t, int>> cycleIds;  // (order, id) of the sets after set 0
  EngineStats retiredStats;       // counters of removed sets
  std::vector<PendingOp> drained;  // empty between iterations, but for a caller's kYield
  // Config::spinTime, or its default for this host (constructor).
  std::chrono::microseconds spinTime{0};
  // When a cycle last executed a response (the loop thread spins for
  // up to spinTime after it instead of sleeping).
  std::chrono::steady_clock::time_point lastWorkOnLoop{};
  std::unique_ptr<autotune::Autotuner> tuner;    // rank 0 with KOLO_AUTOTUNE
  std::optional<autotune::Decision> proposal;    // rank 0: not yet applied
  std::unique_ptr<timeline::Timeline> timeline;  // cycles; null: off
  std::thread thread;
  // Who runs the cycles (see CycleGate); shared with every handle.
  std::shared_ptr<CycleGate> gate = std::make_shared<CycleGate>();
  // Callers may run the cycles until the first CUDA operation
  // (CycleGate::loopOnly, set before it is queued: the loop thread owns the
  // device), and not while this rank has joined a set (the table says so
  // before the join is queued): a joined rank takes part in operations it
  // did not submit, CUDA ones included.
  bool callerMayDrive() const { return !gate->loopOnly.load() && !table.anyJoined(); }

  std::atomic<bool> shutdownRequested{false};
  std::atomic<bool> abortRequested{false};
  std::mutex changeMu;  // serialises process set changes of caller threads
  int changeCount = 0;  // guarded by changeMu: names them, same on every rank

  // Local sets (addLocalProcessSet): connected by callers, installed by the loop.
  std::atomic<int> nextLocalId{Engine::kFirstLocalProcessSetId};
  std::mutex localMu;               // guards the two below
  std::set<std::string> localKeys;  // every key this rank gave (never reused)
  // Connected and waiting for set 0's response that installs them.
  std::map<std::string, std::unique_ptr<ProcessSetState>> localConnected;

  // Point-to-point messages: the pairs by peer (guarded by pairMu) and the
  // receiving side (its own lock).
  std::mutex pairMu;
  std::map<int, PeerPair> pairs;
  Mailbox mailbox;

  // Timeline hand-off from any thread to the loop.
  std::mutex timelineMu;
  std::condition_variable timelineCv;
  std::unique_ptr<timeline::Timeline> timelineNext;  // guarded by timelineMu
  uint64_t timelineRequested = 0;                    // guarded by timelineMu
  uint64_t timelineApplied = 0;                      // guarded by timelineMu
  bool loopDone = false;  // guarded by timelineMu: the loop left for good
  std::atomic<bool> timelineChange{false};

  std::mutex joinMu;  // serialises joining the loop thread
  bool joinedThread = false;

  mutable std::mutex mu;  // guards the fields below
  std::string abortMessage;
  EngineStats publishedStats;
  std::map<int, EngineStats> publishedSetStats;
  Status failure;
  TuningState tuningState;
};

}  // namespace kolo
