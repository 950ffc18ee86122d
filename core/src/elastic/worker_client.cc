#include "elastic/worker_client.h"

#include <chrono>
#include <utility>

#include "kolo/error.h"
#include "kolo/tcp_store.h"

namespace kolo::elastic::detail {
namespace {

// How long one blocking read of the next world lasts before the worker looks
// at elastic/finished again.
constexpr auto kWorldPoll = std::chrono::milliseconds(500);

bool isRendezvousFailure(const Error& e) {
  return e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout ||
         e.code() == ErrorCode::kShutdown;
}

}  // namespace

WorkerClient::WorkerClient(const LaunchInfo& info, const Config& config)
    : worker_(info.elasticWorker) {
  KOLO_CHECK_ARG(worker_ >= 0, "WorkerClient: not an elastic worker");
  TcpStoreOptions options;
  options.connectTimeout = config.timeout;
  store_ = makeTcpStore(info.rendezvous.addr, info.rendezvous.port, info.rendezvous.secret,
                        options);
}

World WorkerClient::world() const {
  std::lock_guard<std::mutex> lock(mu_);
  return world_;
}

void WorkerClient::setLeaveReason(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  reason_ = reason;
}

int64_t WorkerClient::readNotice() {
  if (!store_->check(keys::kNotice)) return 0;
  return integerOf(store_->get(keys::kNotice, std::chrono::seconds(5)), keys::kNotice);
}

void WorkerClient::announceReady(int64_t left, const std::string& reason) {
  // The reason first: the driver reads it once it sees the ready value change.
  store_->set(keys::reason(worker_), textValue(reason));
  store_->set(keys::ready(worker_), textValue(std::to_string(left)));
}

void WorkerClient::throwIfFinished() {
  if (!store_->check(keys::kFinished)) return;
  std::string why = textOf(store_->get(keys::kFinished, std::chrono::seconds(5)));
  throw ShutdownError("the elastic job is ending (" + why + "); worker " +
                      std::to_string(worker_) + " joins no further world");
}

std::unique_ptr<Engine> WorkerClient::startEngine(
    const Config& config, const std::vector<std::vector<int>>& processSets) {
  int64_t left;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left = world_.version;
    reason = reason_.empty() ? (left == 0 ? "started" : "re-initialised") : reason_;
    reason_.clear();
  }
  // Worlds listing this worker can only be formed after it announced itself,
  // so a new worker need not read the worlds that came before.
  int64_t next = left + 1;
  if (left == 0 && store_->check(keys::kWorld)) {
    next = integerOf(store_->get(keys::kWorld, std::chrono::seconds(5)), keys::kWorld) + 1;
  }
  announceReady(left, reason);
  for (;;) {
    throwIfFinished();
    std::vector<char> record;
    try {
      record = store_->get(keys::world(next), kWorldPoll);
    } catch (const Timeout&) {
      continue;  // no newer world yet
    }
    World world = decodeWorld(textOf(record));
    const WorldMember* me = world.find(worker_);
    if (me == nullptr) {
      ++next;  // formed without this worker (it was not ready in time)
      continue;
    }
    auto store = std::make_shared<PrefixStore>(keys::worldPrefix(world.version), store_);
    try {
      auto engine = std::make_unique<Engine>(config, me->identity, store, processSets);
      std::lock_guard<std::mutex> lock(mu_);
      world_ = std::move(world);
      return engine;
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("elastic world " + std::to_string(world.version) + " of " +
                            std::to_string(me->identity.size) + " ranks: " + e.what() +
                            " (the process sets given to the first init() are rebuilt in every "
                            "world; add sets that depend on the world size in a reset callback)");
    } catch (const Error& e) {
      if (!isRendezvousFailure(e)) throw;
      // A member died while the world formed: leave it and wait for the next.
      {
        std::lock_guard<std::mutex> lock(mu_);
        world_ = world;
      }
      announceReady(world.version,
                    "rendezvous of world " + std::to_string(world.version) + " failed: " + e.what());
      next = world.version + 1;
    }
  }
}

}  // namespace kolo::elastic::detail
