// Engine: caller-side checks and the background loop that drives the
// controller (negotiation) and the executor (data plane).
#include "kolo/engine.h"

#include <atomic>
#include <thread>
#include <unordered_map>

#include "comm/select.h"
#include "controller.h"
#include "executor.h"
#include "failure.h"
#include "logging.h"
#include "kolo/tcp_store.h"
#include "request_check.h"
#include "tensor_queue.h"

namespace kolo {

struct Engine::Impl {
  Impl(Config c, Identity id, std::shared_ptr<Store> s);

  Handle push(std::vector<PendingOp> ops);
  void stopAndJoin();

  // --- loop thread only (…OnLoop) ---
  void loopOnLoop();
  void admitOnLoop(std::vector<PendingOp> fresh, CycleInput& in);
  void executeOnLoop(const Response& r, bool fromCache);
  void completeOnLoop(PendingOp& op, const Status& status);
  void failAllOnLoop(const Status& status);
  void revertEvictedOnLoop(int bit);

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

  std::unordered_map<std::string, PendingOp> pending;  // loop thread
  std::vector<int> invalidBits;                         // loop thread
  std::vector<bool> joined;                             // loop thread
  std::thread thread;

  std::atomic<bool> shutdownRequested{false};
  std::atomic<bool> abortRequested{false};
  std::atomic<bool> localJoined{false};  // join() called, not yet completed

  std::mutex joinMu;  // serialises joining the loop thread
  bool joinedThread = false;

  mutable std::mutex mu;  // guards the fields below
  std::string abortMessage;
  EngineStats publishedStats;
  Status failure;
};

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
      joined(id.size, false) {
  KOLO_CHECK_ARG(identity.size >= 1 && identity.rank >= 0 && identity.rank < identity.size,
                 "invalid identity: rank " + std::to_string(identity.rank) + " of size " +
                     std::to_string(identity.size));
  KOLO_CHECK_ARG(rootStore != nullptr, "kolo::Engine needs a rendezvous store");
  log = makeLogger(identity.rank, config.logLevel);
  store = generationStore(identity, rootStore);
  rootStore->set("kolo/arrived/" + std::to_string(identity.rank), {'1'});

  comm::BackendArgs controlArgs{config, identity,
                                std::make_shared<PrefixStore>("control/", store),
                                localAddressFor(identity, *rootStore)};
  comm::BackendArgs dataArgs{config, identity, std::make_shared<PrefixStore>("data/", store),
                             controlArgs.localAddress};
  controller = std::make_unique<Controller>(
      config, identity, comm::createControlChannel(config.controller, controlArgs), cache,
      loopStats);
  executor = std::make_unique<Executor>(
      identity, comm::createCollectives(config.cpuOperations, dataArgs), loopStats);
  log->debug("engine up: rank {}/{}, controller {}, cpu operations {}", identity.rank,
             identity.size, config.controller, config.cpuOperations);
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

// ---------------------------------------------------------------------------
// Background loop.

void Engine::Impl::loopOnLoop() {
  auto cycleStart = std::chrono::steady_clock::now();
  while (true) {
    queue.waitForWork(cycleStart + config.cycleTime);
    cycleStart = std::chrono::steady_clock::now();
    CycleInput in;
    admitOnLoop(queue.drain(), in);
    in.shutdown = shutdownRequested.load();
    in.abort = abortRequested.load();
    if (in.abort) {
      std::lock_guard<std::mutex> lock(mu);
      in.abortMessage = abortMessage;
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
      for (int bit : out.evictedBits) revertEvictedOnLoop(bit);
      for (const auto& r : out.cached) executeOnLoop(r, true);
      for (const auto& r : out.uncached) executeOnLoop(r, false);
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
    if (cache.enabled() && ResponseCache::cacheable(q.op)) {
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

void Engine::Impl::revertEvictedOnLoop(int bit) {
  for (auto& [name, op] : pending) {
    if (op.state == PendingOp::State::kCached && op.bit == bit) {
      op.state = PendingOp::State::kNew;
      op.bit = -1;
    }
  }
}

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
  for (const auto& name : r.names) {
    auto it = pending.find(name);
    if (it == pending.end()) {
      KOLO_ENFORCE(joined[identity.rank] || r.op == OpType::kBarrier,
                   "response for '" + name + "' that this rank never submitted");
      ops.push_back(nullptr);
    } else {
      ops.push_back(&it->second);
    }
  }
  executor->execute(r, ops);
  for (size_t i = 0; i < r.names.size(); ++i) {
    if (cache.enabled() && ResponseCache::cacheable(r.op)) {
      if (fromCache) {
        int bit = cache.bitOf(r.names[i]);
        if (bit >= 0) cache.touch(bit);
      } else {
        Response single = r;
        single.names = {r.names[i]};
        single.shapes = {r.shapes[i]};
        int evicted = -1;
        cache.put(single, &evicted);
        if (evicted >= 0) revertEvictedOnLoop(evicted);
      }
    }
    if (ops[i] != nullptr) completeOnLoop(*ops[i], Status::Ok());
  }
}

void Engine::Impl::completeOnLoop(PendingOp& op, const Status& status) {
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
