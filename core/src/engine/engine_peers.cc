// Engine: point-to-point messages (send, recv, recv from any source).
//
// Each pair of ranks that exchange messages gets a local process set of
// its two ranks, made the first time either side sends: the sender asks
// through an internal op of set 0 that only it submits (every rank sees
// the response, and the peer starts connecting at once, whether or not it
// has called recv yet); both connect on a connector thread and install the
// set as any local set. A message is a broadcast from the sender in the
// pair's set, named by its tag and its place among the sender's messages
// to that peer with that tag, and ready as soon as the sender submitted it
// (wire::isMessageName): the receiver takes part without submitting it,
// into a buffer of the engine's, and its mailbox (engine/mailbox.h) hands
// it to the first receive that matches.
#include <algorithm>
#include <utility>

#include "engine/engine_impl.h"
#include "wire/message.h"

namespace kolo {

namespace {
constexpr char kPairKeyPrefix[] = "kolo.pair.";
}  // namespace

std::string pairKey(int a, int b) {
  return kPairKeyPrefix + std::to_string(std::min(a, b)) + "-" + std::to_string(std::max(a, b));
}

bool isPairKey(const std::string& key) { return key.rfind(kPairKeyPrefix, 0) == 0; }

namespace {

PendingOp messageOp(Request request, Entry entry, std::shared_ptr<HandleState> handle) {
  PendingOp op;
  op.msg.request = std::move(request);
  op.entry = std::move(entry);
  op.handle = std::move(handle);
  return op;
}

}  // namespace

Handle Engine::send(int peer, int tag, Request request, Entry entry) {
  Impl& impl = *impl_;
  const int self = impl.identity.rank;
  KOLO_CHECK_ARG(peer >= 0 && peer < impl.identity.size && peer != self,
                 "send: peer " + std::to_string(peer) + " is not another rank of this job (size " +
                     std::to_string(impl.identity.size) + ", this rank " + std::to_string(self) +
                     ")");
  KOLO_CHECK_ARG(tag >= 0, "send: tag " + std::to_string(tag) + " is negative");
  KOLO_CHECK_ARG(request.device == DeviceKind::kCpu,
                 "send: kolo's point-to-point messages take CPU tensors (move the tensor to the "
                 "CPU, or use a collective for GPU tensors)");
  KOLO_CHECK_ARG(entry.input != nullptr || numElements(request.shape) == 0, "send: no input");
  KOLO_CHECK_ARG(!impl.runningCyclesHere() || impl.pairReady(peer),
                 "send: the first send to a peer may not come from a completion callback");
  request.op = OpType::kBroadcast;
  request.root = self;
  entry.output = const_cast<void*>(entry.input);  // the root's output is its input
  auto handle = std::make_shared<HandleState>();
  handle->spin = impl.spinTime;
  handle->gate = impl.gate;
  Handle result(handle);
  std::lock_guard<std::mutex> lock(impl.pairMu);
  PeerPair& pair = impl.pairs[peer];
  if (pair.state == PeerPair::State::kFailed) throw PeerFailure(pair.failure.message);
  request.name = wire::messageName(tag, self, pair.sent[tag]++);
  PendingOp op = messageOp(std::move(request), std::move(entry), std::move(handle));
  if (pair.state == PeerPair::State::kReady) {
    op.msg.request.processSet = pair.setId;
    op.msg.request.root = self < peer ? 0 : 1;  // the sender's rank in the pair's set
    std::vector<PendingOp> ops;
    ops.push_back(std::move(op));
    impl.queue.push(std::move(ops));
    return result;
  }
  pair.waiting.push_back(std::move(op));
  if (pair.state == PeerPair::State::kNone) impl.requestPairLocked(peer, pair);
  return result;
}

Handle Engine::recv(int peer, int tag, Request request, Entry entry) {
  Impl& impl = *impl_;
  const int self = impl.identity.rank;
  KOLO_CHECK_ARG(peer == kAnySource || (peer >= 0 && peer < impl.identity.size && peer != self),
                 "recv: peer " + std::to_string(peer) +
                     " is not another rank of this job nor kAnySource (size " +
                     std::to_string(impl.identity.size) + ", this rank " + std::to_string(self) +
                     ")");
  KOLO_CHECK_ARG(tag >= 0, "recv: tag " + std::to_string(tag) + " is negative");
  KOLO_CHECK_ARG(request.device == DeviceKind::kCpu,
                 "recv: kolo's point-to-point messages take CPU tensors (receive into a CPU "
                 "tensor, or use a collective for GPU tensors)");
  KOLO_CHECK_ARG(entry.output != nullptr || numElements(request.shape) == 0, "recv: no output");
  if (impl.queue.closed()) throw ShutdownError("recv: the engine has stopped");
  PeerReceive r;
  r.source = peer;
  r.tag = tag;
  r.request = std::move(request);
  r.entry = std::move(entry);
  r.handle = std::make_shared<HandleState>();
  r.handle->spin = impl.spinTime;
  r.handle->gate = impl.gate;
  Handle result(r.handle);
  if (auto message = impl.mailbox.post(r)) completeReceive(r, *message);
  return result;
}

bool Engine::Impl::pairReady(int peer) {
  std::lock_guard<std::mutex> lock(pairMu);
  auto it = pairs.find(peer);
  return it != pairs.end() && it->second.state == PeerPair::State::kReady;
}

void Engine::Impl::requestPairLocked(int peer, PeerPair& pair) {
  pair.state = PeerPair::State::kConnecting;
  // Set 0 tells the peer (and every rank, which ignores it) to connect;
  // ready as soon as this rank submitted it.
  PendingOp op;
  op.msg.request.name =
      "kolo.pair_request." + std::to_string(identity.rank) + "." + std::to_string(peer);
  op.msg.request.op = OpType::kProcessSet;
  op.msg.setChange.ranks = {std::min(identity.rank, peer), std::max(identity.rank, peer)};
  op.msg.setChange.localKey = pairKey(identity.rank, peer);
  op.msg.setChange.pairRequest = true;
  op.handle = std::make_shared<HandleState>();
  std::vector<PendingOp> ops;
  ops.push_back(std::move(op));
  queue.push(std::move(ops));
}

void Engine::Impl::pairRequestedOnLoop(const ProcessSetChange& change) {
  const int self = identity.rank;
  if (change.ranks.size() != 2 || (change.ranks[0] != self && change.ranks[1] != self)) return;
  const int peer = change.ranks[0] == self ? change.ranks[1] : change.ranks[0];
  std::lock_guard<std::mutex> lock(pairMu);
  PeerPair& pair = pairs[peer];
  if (pair.connector.joinable()) return;  // both asked: one connector each side
  pair.state = PeerPair::State::kConnecting;
  const std::string key = change.localKey;
  const std::vector<int> ranks(change.ranks.begin(), change.ranks.end());
  pair.connector = std::thread([this, key, ranks, peer] {
    try {
      const int id = nextLocalId++;
      auto set = connectProcessSet(processSetContext(), id, ranks, key);
      {
        std::lock_guard<std::mutex> l(localMu);
        localKeys.insert(key);
        localConnected[key] = std::move(set);
      }
      ProcessSetChange install;
      install.ranks.assign(ranks.begin(), ranks.end());
      install.localKey = key;
      auto state = changeProcessSets(std::move(install), "kolo.local_set." + key);
      std::lock_guard<std::mutex> l(state->mu);
      if (!state->status.ok()) throw Error(state->status.code, state->status.message);
    } catch (const std::exception& e) {
      failPair(peer, Status{ErrorCode::kPeerFailure, "messages with rank " + std::to_string(peer) +
                                                         ": could not connect: " + e.what()});
    }
  });
}

void Engine::Impl::pairInstalledOnLoop(const ProcessSetState& set) {
  const int self = identity.rank;
  const int peer = set.ranks[0] == self ? set.ranks[1] : set.ranks[0];
  std::vector<PendingOp> ops;
  {
    std::lock_guard<std::mutex> lock(pairMu);
    PeerPair& pair = pairs[peer];
    pair.state = PeerPair::State::kReady;
    pair.setId = set.id;
    ops.swap(pair.waiting);
  }
  for (auto& op : ops) {
    op.msg.request.processSet = set.id;
    op.msg.request.root = self < peer ? 0 : 1;
  }
  // Routed at once: they run from the set's first cycle, in the order sent.
  ProcessSetState& installed = *sets.at(set.id);
  for (auto& op : ops) installed.fresh.push_back(std::move(op));
}

void Engine::Impl::failPair(int peer, const Status& status) {
  std::vector<PendingOp> ops;
  {
    std::lock_guard<std::mutex> lock(pairMu);
    PeerPair& pair = pairs[peer];
    if (pair.state != PeerPair::State::kReady) {
      pair.state = PeerPair::State::kFailed;
      pair.failure = status;
    }
    ops.swap(pair.waiting);
  }
  for (auto& op : ops) {
    if (op.entry.onDone) {
      try {
        op.entry.onDone(status);
      } catch (...) {
      }
    }
    op.handle->finish(status);
    op.handle->wake();
  }
}

void Engine::Impl::receiveOnLoop(ProcessSetState& set, const Response& r, size_t i) {
  // This rank did not submit the message; it takes part with a buffer of
  // its own, which its mailbox hands to a receive once it is done.
  const std::string& name = r.names[i];
  PeerMessage message;
  message.source = set.ranks[static_cast<size_t>(r.root)];
  message.tag = wire::messageTag(name);
  message.seq = wire::messageSeq(name);
  message.dtype = r.dtype;
  message.shape = r.shapes[i];
  message.bytes = std::make_shared<std::vector<char>>(
      static_cast<size_t>(numElements(message.shape)) * elementSize(r.dtype));
  PendingOp op;
  op.msg.request.name = name;
  op.msg.request.op = OpType::kBroadcast;
  op.msg.request.dtype = r.dtype;
  op.msg.request.shape = message.shape;
  op.msg.request.processSet = set.id;
  op.entry.input = message.bytes->data();
  op.entry.output = message.bytes->data();
  op.entry.onDone = [this, message](const Status& s) mutable {
    if (!s.ok()) return;  // the engine fails: failAllOnLoop fails the receives
    for (auto& [receive, taken] : mailbox.deliver(message)) completeReceive(receive, taken);
  };
  op.handle = std::make_shared<HandleState>();
  op.state = PendingOp::State::kSent;
  set.pending.emplace(name, std::move(op));
}

void Engine::Impl::stopPeersAfterLoop(const Status& status) {
  for (auto& receive : mailbox.takeReceives()) failReceive(receive, status);
  std::map<int, PeerPair> all;
  {
    std::lock_guard<std::mutex> lock(pairMu);
    for (auto& [peer, pair] : pairs) {
      if (pair.connector.joinable()) all[peer].connector = std::move(pair.connector);
    }
  }
  for (auto& [peer, pair] : all) pair.connector.join();
  std::vector<int> peers;
  {
    std::lock_guard<std::mutex> lock(pairMu);
    for (auto& [peer, pair] : pairs) peers.push_back(peer);
  }
  for (int peer : peers) failPair(peer, status);
}

}  // namespace kolo
