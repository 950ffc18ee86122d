// Engine: construction, rendezvous and the caller-side API (any thread).
#include <sched.h>

#include <algorithm>

#include "common/thread_name.h"
#include "engine/engine_impl.h"
#include "kolo/arrival.h"
#include "wire/start.h"

namespace kolo {

namespace {

std::string localAddressFor(const Identity& id, const Store& store) {
  if (id.localSize == id.size) return "127.0.0.1";
  std::string addr = localAddressOf(store);
  return addr.empty() ? "127.0.0.1" : addr;
}

// KOLO_SPIN_TIME when unset: spin only where every local rank's two busy
// threads (caller and background loop) can each have a core.
std::chrono::microseconds defaultSpinTime(int localSize) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) cores = CPU_COUNT(&cpus);
  return cores >= 2 * std::max(localSize, 1) ? std::chrono::microseconds(50)
                                             : std::chrono::microseconds(0);
}

std::shared_ptr<Store> generationStore(const Identity& id, const std::shared_ptr<Store>& s) {
  // Each init of a job gets fresh keys; ranks init the same number of times.
  int64_t gen = s->add("kolo/generation/" + std::to_string(id.rank), 1);
  return std::make_shared<PrefixStore>("kolo/" + std::to_string(gen) + "/", s);
}

std::string describeSets(const std::vector<std::vector<int>>& sets) {
  std::string s;
  for (const auto& ranks : sets) {
    s += "[";
    for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
    s += "]";
  }
  return s.empty() ? "none" : s;
}

// What every rank learns from the others once set 0 is connected: the host
// of each rank (for the local and cross ranks of process sets), and whether
// every rank passed the same static process sets (rank 0's list is the
// reference). Over set 0's control channel, not the store: under plain
// mpirun each process has a private store.
wire::StartSummary exchangeStartInfo(comm::ControlChannel& channel, const Identity& id,
                                     const std::string& host, const std::string& sets) {
  auto gathered = channel.gatherv(wire::encode(wire::StartRequest{host, sets}), 0);
  std::vector<char> bytes;
  if (id.rank == 0) {
    wire::StartSummary summary;
    for (int r = 0; r < id.size; ++r) {
      wire::StartRequest theirs = wire::decodeStartRequest(gathered[r]);
      if (summary.mismatch.empty() && theirs.sets != sets) {
        summary.mismatch = "init(process_sets=...): rank " + std::to_string(r) + " passed " +
                           theirs.sets + " but rank 0 passed " + sets +
                           "; every rank must pass the same process sets in the same order";
      }
      summary.hosts.push_back(std::move(theirs.host));
    }
    bytes = wire::encode(summary);
  }
  channel.broadcast(bytes, 0);
  return wire::decodeStartSummary(bytes, id.size);
}

}  // namespace

Engine::Impl::Impl(Config c, Identity id, std::shared_ptr<Store> s,
                   std::vector<std::vector<int>> staticSets)
    : config(std::move(c)),
      identity(id),
      rootStore(std::move(s)),
      table(id.rank),
      tunables{config.fusionThresholdBytes, config.cycleTime, config.cacheCapacity > 0} {
  KOLO_CHECK_ARG(identity.size >= 1 && identity.rank >= 0 && identity.rank < identity.size,
                 "invalid identity: rank " + std::to_string(identity.rank) + " of size " +
                     std::to_string(identity.size));
  KOLO_CHECK_ARG(rootStore != nullptr, "kolo::Engine needs a rendezvous store");
  gpuEvents->queue = &queue;
  spinTime = config.spinTime.value_or(defaultSpinTime(identity.localSize));
  for (auto& ranks : staticSets) {
    ranks = checkedProcessSetRanks(std::move(ranks), identity.size, "init(process_sets=...)");
  }
  log = makeLogger(identity.rank, config);
  if (!config.timelinePath.empty()) {
    try {
      timeline = std::make_unique<timeline::Timeline>(config.timelinePath, identity.rank,
                                                      config.timelineMarkCycles);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("KOLO_TIMELINE: ") + e.what());
    }
  }
  store = generationStore(identity, rootStore);
  if (gpuDevices) {
    // A wait of the loop thread on the device (host staging) gives up when
    // a rank, this one included (Engine::abort), published an abort, and
    // after KOLO_TIMEOUT: the loop thread then fails its ops naming why.
    gpuDevices->bound(config.timeout, [store = store, size = identity.size] {
      return publishedAbort(*store, size);
    });
  }
  rootStore->set(arrivalKey(identity.rank), {'1'});
  localAddress = localAddressFor(identity, *rootStore);

  std::vector<int> all(identity.size);
  for (int r = 0; r < identity.size; ++r) all[r] = r;
  table.add(0, all);
  sets[0] = connectProcessSet(processSetContext(), 0, all);
  // Set 0's data plane decides whether allreduce may switch between flat
  // and two-level; every rank's plane starts the same way.
  comm::Collectives& plane = sets[0]->executor->collectives();
  tunables.hierarchicalAllreduce = plane.twoLevelAllreduce();
  if (config.autotune && identity.rank == 0) {
    tuner = std::make_unique<autotune::Autotuner>(
        config, tunables, config.cacheCapacity > 0, log,
        plane.canSwitchTwoLevelAllreduce() && !config.hierarchicalAllreduce.has_value());
  }
  tuningState.current = tunables;
  if (sets[0]->dataPlaneFellBack && identity.rank == 0) {
    log->warn("cpu data plane: {}", sets[0]->dataPlane);
  }
  wire::StartSummary start = exchangeStartInfo(sets[0]->controller->channel(), identity, localAddress,
                                      describeSets(staticSets));
  if (!start.mismatch.empty()) throw InvalidArgument(start.mismatch);
  hosts = std::move(start.hosts);
  // Static sets: ids 1, 2, ... in the order given; members connect in that
  // order (the same on every member, so no two of them wait on each other).
  for (auto& ranks : staticSets) {
    const int existing = table.find(ranks);
    if (existing >= 0) {
      throw InvalidArgument("init(process_sets=...): the ranks of " +
                            processSetLabel(existing, ranks) + " are given again" +
                            (existing == 0 ? " (all ranks: the global process set)" : ""));
    }
    const int setId = nextSetId++;
    table.add(setId, ranks);
    if (std::binary_search(ranks.begin(), ranks.end(), identity.rank)) {
      sets[setId] = connectProcessSet(processSetContext(), setId, ranks);
      sets[setId]->order = nextOrder++;
    }
  }
  for (auto& [setId, set] : sets) set->executor->setTimeline(timeline.get());
  publishPresence(*store, identity.rank);
  log->debug("engine up: rank {}/{}, controller {}, cpu data plane {}, {} process set(s)",
             identity.rank, identity.size, config.controller, sets[0]->dataPlane,
             table.all().size());
  gate->engine = this;  // callers waiting from now on may run the cycles
  thread = std::thread([this] {
    nameThisThread("kolo-loop");
    loopOnLoop();
  });
}

Engine::Engine(Config config, Identity identity, std::shared_ptr<Store> store,
               std::vector<std::vector<int>> processSets)
    : impl_(std::make_unique<Impl>(std::move(config), identity, std::move(store),
                                   std::move(processSets))) {}

Engine::~Engine() {
  try {
    shutdown();
  } catch (...) {
  }
}

Handle Engine::Impl::push(std::vector<PendingOp> ops) {
  Handle first(ops.front().handle);
  for (const auto& op : ops) {
    // Before the op is queued: whoever drains it then sees the flag.
    if (op.msg.request.device == DeviceKind::kCuda) gate->loopOnly.store(true);
  }
  // Right after a caller ran the cycles, the loop thread is left asleep: the
  // caller most likely drains this op itself (CycleGate::quietPush),
  // unless callers may no longer run them (this op is a CUDA one, or a
  // join started).
  queue.push(std::move(ops), !(gate->quietPush() && callerMayDrive()));
  return first;
}

namespace {

// The completion state of a new op; its waiters spin for up to spin, and
// wait() may run the engine's cycles through gate.
std::shared_ptr<HandleState> newHandle(std::chrono::microseconds spin,
                                       std::shared_ptr<CycleGate> gate) {
  auto state = std::make_shared<HandleState>();
  state->spin = spin;
  state->gate = std::move(gate);
  return state;
}

// The op of request in set, with a broadcast root translated to its rank
// within the set.
PendingOp pendingOp(Request request, Entry entry, const ProcessSetInfo& set,
                    std::chrono::microseconds spin, std::shared_ptr<CycleGate> gate) {
  if (request.op == OpType::kBroadcast) {
    request.root = static_cast<int>(
        std::lower_bound(set.ranks.begin(), set.ranks.end(), request.root) - set.ranks.begin());
  }
  PendingOp op;
  op.msg.request = std::move(request);
  op.entry = std::move(entry);
  op.handle = newHandle(spin, std::move(gate));
  return op;
}

std::string opWhat(const Request& q) {
  return "'" + q.name + "' (" + toString(q.op) + ")";
}

}  // namespace

Handle Engine::enqueue(Request request, Entry entry) {
  const ProcessSetInfo set = impl_->table.memberOf(request.processSet, opWhat(request));
  checkRequest(request, entry, set, impl_->config);
  if (impl_->table.joined(request.processSet)) {
    throw InvalidArgument("'" + request.name + "': this rank has joined" +
                          (set.id == 0 ? "" : " " + processSetLabel(set.id, set.ranks)) +
                          "; no new operations there until every rank has joined");
  }
  std::vector<PendingOp> ops;
  ops.push_back(
      pendingOp(std::move(request), std::move(entry), set, impl_->spinTime, impl_->gate));
  return impl_->push(std::move(ops));
}

std::vector<Handle> Engine::enqueueGroup(std::vector<Request> requests,
                                         std::vector<Entry> entries) {
  KOLO_CHECK_ARG(requests.size() == entries.size(),
                 "enqueueGroup: " + std::to_string(requests.size()) + " requests but " +
                     std::to_string(entries.size()) + " entries");
  KOLO_CHECK_ARG(!requests.empty(), "enqueueGroup: empty group");
  const OpType kind = requests[0].op;
  const int setId = requests[0].processSet;
  KOLO_CHECK_ARG(kind == OpType::kAllreduce || kind == OpType::kAllgather ||
                     kind == OpType::kReducescatter,
                 "enqueueGroup: '" + requests[0].name + "' is a " + toString(kind) +
                     "; groups hold allreduces, allgathers or reducescatters");
  const ProcessSetInfo set = impl_->table.memberOf(setId, opWhat(requests[0]));
  if (impl_->table.joined(setId)) {
    throw InvalidArgument("'" + requests[0].name + "': this rank has joined; no new "
                          "operations there until every rank has joined");
  }
  std::string group = "group";
  for (const auto& r : requests) group += ":" + r.name;
  std::vector<PendingOp> ops;
  std::vector<Handle> handles;
  for (size_t i = 0; i < requests.size(); ++i) {
    KOLO_CHECK_ARG(requests[i].op == kind && requests[i].processSet == setId,
                   "enqueueGroup: '" + requests[i].name + "' is a " +
                       toString(requests[i].op) + " of process set " +
                       std::to_string(requests[i].processSet) + " but '" + requests[0].name +
                       "' a " + toString(kind) + " of process set " + std::to_string(setId) +
                       "; a group holds one kind of operation in one process set");
    checkRequest(requests[i], entries[i], set, impl_->config);
    PendingOp op = pendingOp(std::move(requests[i]), std::move(entries[i]), set,
                             impl_->spinTime, impl_->gate);
    op.msg.group = group;
    op.msg.groupSize = static_cast<int>(entries.size());
    handles.emplace_back(op.handle);
    ops.push_back(std::move(op));
  }
  impl_->push(std::move(ops));
  return handles;
}

Handle Engine::join(int processSet) {
  impl_->table.memberOf(processSet, "join");
  PendingOp op;
  op.msg.request.name = kJoinName;
  op.msg.request.op = OpType::kJoin;
  op.msg.request.processSet = processSet;
  op.handle = newHandle(impl_->spinTime, impl_->gate);
  impl_->table.setJoined(processSet, true);
  std::vector<PendingOp> ops;
  ops.push_back(std::move(op));
  try {
    return impl_->push(std::move(ops));
  } catch (...) {
    impl_->table.setJoined(processSet, false);
    throw;
  }
}

std::string Engine::nameOrNext(const std::string& name, const std::string& op,
                               int processSet) {
  if (!name.empty()) return name;
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->namesMu);
    n = impl_->nameCounters[{processSet, op}]++;
  }
  std::string set = processSet == 0 ? "" : "ps" + std::to_string(processSet) + ".";
  return "noname." + op + "." + set + std::to_string(n);
}

void Engine::resetNames() {
  std::lock_guard<std::mutex> lock(impl_->namesMu);
  impl_->nameCounters.clear();
}

Handle Engine::barrier(int processSet) {
  impl_->table.memberOf(processSet, "barrier");
  PendingOp op;
  op.msg.request.name = kBarrierName;
  op.msg.request.op = OpType::kBarrier;
  op.msg.request.processSet = processSet;
  op.handle = newHandle(impl_->spinTime, impl_->gate);
  std::vector<PendingOp> ops;
  ops.push_back(std::move(op));
  return impl_->push(std::move(ops));
}

ProcessSetContext Engine::Impl::processSetContext() {
  return ProcessSetContext{config, identity, store, localAddress, hosts, tunables, gpuDevices};
}

std::shared_ptr<HandleState> Engine::Impl::changeProcessSets(ProcessSetChange change,
                                                             std::string name) {
  std::unique_lock<std::mutex> lock(changeMu, std::defer_lock);
  PendingOp op;
  if (name.empty()) {
    // Every rank changes the sets in the same order, so the n-th change has
    // the same name everywhere; the coordinator checks that they agree.
    lock.lock();
    name = "kolo.process_set." + std::to_string(changeCount++);
  }
  op.msg.request.name = std::move(name);
  op.msg.request.op = OpType::kProcessSet;
  op.msg.setChange = std::move(change);
  op.handle = newHandle(spinTime, gate);
  auto state = op.handle;
  std::vector<PendingOp> ops;
  ops.push_back(std::move(op));
  push(std::move(ops)).wait();
  return state;
}

int Engine::addProcessSet(std::vector<int> ranks) {
  ranks = checkedProcessSetRanks(std::move(ranks), impl_->identity.size, "add_process_set");
  const int existing = impl_->table.find(ranks);
  if (existing >= 0) {
    throw InvalidArgument("add_process_set: " + processSetLabel(existing, ranks) +
                          " already has these ranks" +
                          (existing == 0 ? " (all ranks: the global process set)" : ""));
  }
  ProcessSetChange change;
  change.ranks.assign(ranks.begin(), ranks.end());
  auto state = impl_->changeProcessSets(std::move(change));
  std::lock_guard<std::mutex> lock(state->mu);
  return state->processSetId;
}

namespace {

// The engine's config with a local set's own limits.
Config withLimits(Config config, const ProcessSetLimits& limits) {
  if (limits.timeout) {
    KOLO_CHECK_ARG(limits.timeout->count() > 0,
                   "add_local_process_set: the set's timeout must be positive, got " +
                       std::to_string(limits.timeout->count()) + " ms");
    config.timeout = *limits.timeout;
  }
  for (const auto* t : {&limits.stallCheckTime, &limits.stallShutdownTime}) {
    KOLO_CHECK_ARG(!*t || (*t)->count() >= 0,
                   "add_local_process_set: the set's stall times must be 0 (never) or more, "
                   "got " + std::to_string((*t)->count()) + " ms");
  }
  if (limits.stallCheckTime) config.stallCheckTime = *limits.stallCheckTime;
  if (limits.stallShutdownTime) config.stallShutdownTime = *limits.stallShutdownTime;
  if (!limits.stallShutdownSetting.empty()) config.stallShutdownSetting = limits.stallShutdownSetting;
  return config;
}

}  // namespace

int Engine::addLocalProcessSet(const std::string& key, std::vector<int> ranks,
                               const ProcessSetLimits& limits) {
  KOLO_CHECK_ARG(!key.empty(),
                 "add_local_process_set: the key is empty; give the set a name "
                 "that its members share and no other set of the job has");
  ranks = checkedProcessSetRanks(std::move(ranks), impl_->identity.size, "add_local_process_set");
  const std::string label = localProcessSetLabel(key, ranks);
  KOLO_CHECK_ARG(std::binary_search(ranks.begin(), ranks.end(), impl_->identity.rank),
                 "add_local_process_set: this rank (" + std::to_string(impl_->identity.rank) +
                     ") is not a member of " + label + "; only its members call this");
  KOLO_CHECK_ARG(!impl_->runningCyclesHere(),
                 "add_local_process_set: called from a completion callback; call it from "
                 "another thread");
  const Config config = withLimits(impl_->config, limits);
  {
    std::lock_guard<std::mutex> lock(impl_->localMu);
    KOLO_CHECK_ARG(impl_->localKeys.insert(key).second,
                   "add_local_process_set: key '" + key +
                       "' was given before on this rank; every local set needs a new key");
  }
  const int id = impl_->nextLocalId++;
  // The members connect among themselves here, off the loop thread (which
  // goes on running this rank's other sets); then one op of set 0, which
  // only they submit, installs the set on each of them at one point.
  std::unique_ptr<ProcessSetState> set;
  try {
    Impl& e = *impl_;
    const ProcessSetContext ctx{config,  e.identity, e.store,   e.localAddress,
                                e.hosts, e.tunables, e.gpuDevices};
    set = connectProcessSet(ctx, id, ranks, key);
  } catch (const Timeout& e) {
    throw Timeout(std::string(e.what()) + " (add_local_process_set: every member of " + label +
                  " must call it with the same key and ranks)");
  }
  {
    std::lock_guard<std::mutex> lock(impl_->localMu);
    impl_->localConnected[key] = std::move(set);
  }
  ProcessSetChange change;
  change.ranks.assign(ranks.begin(), ranks.end());
  change.localKey = key;
  try {
    impl_->changeProcessSets(std::move(change), "kolo.local_set." + key);
  } catch (...) {
    std::lock_guard<std::mutex> lock(impl_->localMu);
    impl_->localConnected.erase(key);  // not installed: its connections close
    throw;
  }
  return id;
}

void Engine::removeLocalProcessSet(int id) {
  const ProcessSetInfo info = impl_->table.info(id);  // InvalidArgument when unknown
  KOLO_CHECK_ARG(!info.key.empty(), "remove_local_process_set: process set " + std::to_string(id) +
                                        " was added by every rank; remove it with "
                                        "remove_process_set on every rank");
  KOLO_CHECK_ARG(!impl_->runningCyclesHere(),
                 "remove_local_process_set: called from a completion callback; call it from "
                 "another thread");
  ProcessSetChange change;
  change.ranks.assign(info.ranks.begin(), info.ranks.end());
  change.localKey = info.key;
  change.localRemove = true;
  impl_->changeProcessSets(std::move(change), "kolo.local_set_removal." + info.key);
}

void Engine::removeProcessSet(int id) {
  KOLO_CHECK_ARG(id != 0, "remove_process_set: the global process set (0) cannot be removed");
  const ProcessSetInfo info = impl_->table.info(id);  // InvalidArgument when unknown
  KOLO_CHECK_ARG(info.key.empty(),
                 "remove_process_set: " + localProcessSetLabel(info.key, info.ranks) +
                     " is a local set; its members remove it with "
                     "remove_local_process_set");
  ProcessSetChange change;
  change.removeId = id;
  impl_->changeProcessSets(std::move(change));
}

ProcessSetInfo Engine::processSet(int id) const { return impl_->table.info(id); }

std::vector<ProcessSetInfo> Engine::processSets() const { return impl_->table.all(); }

void Engine::Impl::stopAndJoin() {
  queue.wake();
  std::lock_guard<std::mutex> lock(joinMu);
  if (joinedThread) return;
  if (thread.joinable()) thread.join();
  joinedThread = true;
  Status why;
  {
    std::lock_guard<std::mutex> failed(mu);
    why = failure;
  }
  if (why.ok()) why = Status{ErrorCode::kShutdown, "the engine was shut down"};
  stopPeersAfterLoop(why);
}

void Engine::shutdown() {
  impl_->shutdownRequested = true;
  impl_->stopAndJoin();
}

void Engine::abort(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->abortMessage.empty()) impl_->abortMessage = message.empty() ? "aborted" : message;
  }
  publishAbort(*impl_->store, impl_->identity.rank, message);
  impl_->abortRequested = true;
  // From the thread running the cycles (a completion callback): the loop
  // stops after this cycle; joining here would wait for ourselves.
  if (impl_->runningCyclesHere()) return;
  impl_->stopAndJoin();
}

const Config& Engine::config() const { return impl_->config; }
const Identity& Engine::identity() const { return impl_->identity; }

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->publishedStats;
}

EngineStats Engine::stats(int processSet) const {
  impl_->table.memberOf(processSet, "stats");
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->publishedSetStats.find(processSet);
  return it == impl_->publishedSetStats.end() ? EngineStats{} : it->second;
}

Status Engine::failure() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failure;
}

TuningState Engine::tuning() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->tuningState;
}

void Engine::startTimeline(const std::string& path) {
  KOLO_CHECK_ARG(!path.empty(), "startTimeline: empty path");
  impl_->requestTimeline(std::make_unique<timeline::Timeline>(
      path, impl_->identity.rank, impl_->config.timelineMarkCycles));
}

void Engine::stopTimeline() { impl_->requestTimeline(nullptr); }

void Engine::Impl::requestTimeline(std::unique_ptr<timeline::Timeline> next) {
  std::unique_ptr<timeline::Timeline> unused;  // closed outside the lock
  {
    std::unique_lock<std::mutex> lock(timelineMu);
    if (loopDone) {
      unused = std::move(next);
    } else {
      unused = std::move(timelineNext);
      timelineNext = std::move(next);
      const uint64_t ticket = ++timelineRequested;
      timelineChange = true;
      queue.wake();
      // From a completion callback (the loop itself) the change applies at
      // the next cycle; anywhere else wait for it, so that ops enqueued
      // after startTimeline returns are traced.
      if (!runningCyclesHere()) {
        timelineCv.wait(lock, [&] { return loopDone || timelineApplied >= ticket; });
      }
    }
  }
  if (unused) unused->close();
}

}  // namespace kolo
