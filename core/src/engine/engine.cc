// Engine: construction, rendezvous and the caller-side API (any thread).
#include "engine/engine_impl.h"

namespace kolo {

namespace {

std::string localAddressFor(const Identity& id, const Store& store) {
  if (id.localSize == id.size) return "127.0.0.1";
  std::string addr = localAddressOf(store);
  return addr.empty() ? "127.0.0.1" : addr;
}

std::shared_ptr<Store> generationStore(const Identity& id, const std::shared_ptr<Store>& s) {
  // Each init of a job gets fresh keys; ranks init the same number of times.
  int64_t gen = s->add("kolo/generation/" + std::to_string(id.rank), 1);
  return std::make_shared<PrefixStore>("kolo/" + std::to_string(gen) + "/", s);
}

}  // namespace

Engine::Impl::Impl(Config c, Identity id, std::shared_ptr<Store> s)
    : config(std::move(c)),
      identity(id),
      rootStore(std::move(s)),
      cache(config.cacheCapacity),
      tunables{config.fusionThresholdBytes, config.cycleTime, config.cacheCapacity > 0},
      stall(config, id),
      joined(id.size, false) {
  KOLO_CHECK_ARG(identity.size >= 1 && identity.rank >= 0 && identity.rank < identity.size,
                 "invalid identity: rank " + std::to_string(identity.rank) + " of size " +
                     std::to_string(identity.size));
  KOLO_CHECK_ARG(rootStore != nullptr, "kolo::Engine needs a rendezvous store");
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
  rootStore->set("kolo/arrived/" + std::to_string(identity.rank), {'1'});

  comm::BackendArgs controlArgs{config, identity,
                                std::make_shared<PrefixStore>("control/", store),
                                localAddressFor(identity, *rootStore)};
  comm::BackendArgs dataArgs{config, identity, std::make_shared<PrefixStore>("data/", store),
                             controlArgs.localAddress};
  controller = std::make_unique<Controller>(config, identity, comm::createControlPlane(controlArgs),
                                            cache, loopStats, tunables);
  std::string dataPlane;
  bool fellBack = false;
  executor = std::make_unique<Executor>(
      identity, comm::createCpuDataPlane(dataArgs, &dataPlane, &fellBack), loopStats);
  executor->setTimeline(timeline.get());
  // The data plane decides whether allreduce may switch between flat and
  // two-level; every rank's plane starts the same way.
  comm::Collectives& plane = executor->collectives();
  tunables.hierarchicalAllreduce = plane.twoLevelAllreduce();
  if (config.autotune && identity.rank == 0) {
    tuner = std::make_unique<autotune::Autotuner>(
        config, tunables, cache.enabled(), log,
        plane.canSwitchTwoLevelAllreduce() && !config.hierarchicalAllreduce.has_value());
  }
  tuningState.current = tunables;
  publishPresence(*store, identity.rank);
  if (fellBack && identity.rank == 0) {
    log->warn("cpu data plane: {}", dataPlane);
  }
  log->debug("engine up: rank {}/{}, controller {}, cpu data plane {}", identity.rank,
             identity.size, config.controller, dataPlane);
  thread = std::thread([this] { loopOnLoop(); });
}

Engine::Engine(Config config, Identity identity, std::shared_ptr<Store> store)
    : impl_(std::make_unique<Impl>(std::move(config), identity, std::move(store))) {}

Engine::~Engine() {
  try {
    shutdown();
  } catch (...) {
  }
}

Handle Engine::Impl::push(std::vector<PendingOp> ops) {
  Handle first(ops.front().handle);
  queue.push(std::move(ops));
  return first;
}

Handle Engine::enqueue(Request request, Entry entry) {
  checkRequest(request, entry, impl_->identity);
  if (impl_->localJoined.load()) {
    throw InvalidArgument("'" + request.name + "': this rank has joined; no new operations "
                          "until every rank has joined");
  }
  PendingOp op;
  op.msg.request = std::move(request);
  op.entry = std::move(entry);
  op.handle = std::make_shared<HandleState>();
  std::vector<PendingOp> ops;
  ops.push_back(std::move(op));
  return impl_->push(std::move(ops));
}

std::vector<Handle> Engine::enqueueGroup(std::vector<Request> requests,
                                         std::vector<Entry> entries) {
  KOLO_CHECK_ARG(requests.size() == entries.size(),
                 "enqueueGroup: " + std::to_string(requests.size()) + " requests but " +
                     std::to_string(entries.size()) + " entries");
  KOLO_CHECK_ARG(!requests.empty(), "enqueueGroup: empty group");
  std::string group = "group";
  for (const auto& r : requests) group += ":" + r.name;
  std::vector<PendingOp> ops;
  std::vector<Handle> handles;
  for (size_t i = 0; i < requests.size(); ++i) {
    KOLO_CHECK_ARG(requests[i].op == OpType::kAllreduce,
                   "enqueueGroup: '" + requests[i].name + "' is a " +
                       toString(requests[i].op) + "; groups hold allreduces only");
    checkRequest(requests[i], entries[i], impl_->identity);
    PendingOp op;
    op.msg.request = std::move(requests[i]);
    op.msg.group = group;
    op.msg.groupSize = static_cast<int>(entries.size());
    op.entry = std::move(entries[i]);
    op.handle = std::make_shared<HandleState>();
    handles.emplace_back(op.handle);
    ops.push_back(std::move(op));
  }
  impl_->queue.push(std::move(ops));
  return handles;
}

Handle Engine::join() {
  PendingOp op;
  op.msg.request.name = kJoinName;
  op.msg.request.op = OpType::kJoin;
  op.handle = std::make_shared<HandleState>();
  impl_->localJoined = true;
  std::vector<PendingOp> ops;
  ops.push_back(std::move(op));
  try {
    return impl_->push(std::move(ops));
  } catch (...) {
    impl_->localJoined = false;
    throw;
  }
}

Handle Engine::barrier() {
  PendingOp op;
  op.msg.request.name = kBarrierName;
  op.msg.request.op = OpType::kBarrier;
  op.handle = std::make_shared<HandleState>();
  std::vector<PendingOp> ops;
  ops.push_back(std::move(op));
  return impl_->push(std::move(ops));
}

void Engine::Impl::stopAndJoin() {
  queue.wake();
  std::lock_guard<std::mutex> lock(joinMu);
  if (joinedThread) return;
  if (thread.joinable()) thread.join();
  joinedThread = true;
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
  // From the loop thread itself (a completion callback): it stops after
  // this cycle; joining here would wait for ourselves.
  if (std::this_thread::get_id() == impl_->loopThreadId.load()) return;
  impl_->stopAndJoin();
}

const Config& Engine::config() const { return impl_->config; }
const Identity& Engine::identity() const { return impl_->identity; }

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->publishedStats;
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
      if (std::this_thread::get_id() != loopThreadId.load()) {
        timelineCv.wait(lock, [&] { return loopDone || timelineApplied >= ticket; });
      }
    }
  }
  if (unused) unused->close();
}

}  // namespace kolo
