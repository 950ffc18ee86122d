// kolo::elastic::State, run() and the process-level queries (kolo/elastic.h).
#include <utility>

#include "elastic/worker_client.h"
#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace kolo::elastic {
namespace {

// The failures a new world can recover from: a peer died, hung or left.
bool isWorldFailure(const Error& e) {
  return e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout ||
         e.code() == ErrorCode::kShutdown;
}

}  // namespace

bool enabled() { return detail::processClient() != nullptr; }

int64_t world_version() {
  auto* client = detail::processClient();
  return client != nullptr ? client->world().version : 0;
}

int64_t worker_id() {
  auto* client = detail::processClient();
  return client != nullptr ? client->workerId() : -1;
}

void State::commit() {
  save();
  check_host_updates();
}

void State::check_host_updates() {
  if (detail::hostsUpdated()) throw HostsUpdatedInterrupt();
}

bool detail::hostsUpdated() {
  auto* client = detail::processClient();
  if (client == nullptr) return false;
  Engine& engine = defaultEngine();
  // Rank 0 decides for everyone, so every rank raises at the same step.
  int64_t notice = engine.rank() == 0 ? client->readNotice() : 0;
  Request request;
  request.name = "elastic.host_updates";
  request.op = OpType::kBroadcast;
  request.dtype = DataType::kInt64;
  request.shape = {1};
  request.root = 0;
  Entry entry;
  entry.input = &notice;
  entry.output = &notice;
  engine.enqueue(std::move(request), std::move(entry)).wait();
  return notice > client->world().notice;
}

void State::register_reset_callbacks(std::vector<std::function<void()>> callbacks) {
  for (auto& c : callbacks) callbacks_.push_back(std::move(c));
}

void State::on_reset() {
  for (auto& c : callbacks_) c();
}

namespace detail {

void resetWorld(const std::string& reason) {
  if (auto* client = processClient()) client->setLeaveReason(reason);
  kolo::shutdown();
  kolo::init();
}

void runLoop(State& state, const std::function<void()>& fn) {
  if (!enabled()) {
    state.sync();
    state.save();
    fn();
    return;
  }
  bool reset = false;
  std::string reason;
  for (;;) {
    // Errors of the re-initialisation itself (the job is ending) are final.
    if (reset) {
      resetWorld(reason);
      state.on_reset();
    }
    try {
      state.sync();
      // The synced state is what every rank now holds: the point a failure
      // before the next commit returns to (a new worker would otherwise
      // restore its initial state).
      state.save();
      fn();
      return;
    } catch (const HostsUpdatedInterrupt&) {
      reason = "the host set changed";
    } catch (const Error& e) {
      if (!isWorldFailure(e)) throw;
      reason = e.what();
      state.restore();
    }
    reset = true;
  }
}

}  // namespace detail
}  // namespace kolo::elastic
