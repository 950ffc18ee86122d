#include "engine/mailbox.h"

#include <cstring>
#include <iterator>
#include <utility>

namespace kolo {

void Mailbox::arriveLocked(PeerMessage message,
                           std::vector<std::pair<PeerReceive, PeerMessage>>& done) {
  for (auto it = receives_.begin(); it != receives_.end(); ++it) {
    if (!matches(*it, message)) continue;
    done.emplace_back(std::move(*it), std::move(message));
    receives_.erase(it);
    return;
  }
  messages_.push_back(std::move(message));
}

std::vector<std::pair<PeerReceive, PeerMessage>> Mailbox::deliver(PeerMessage message) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<PeerReceive, PeerMessage>> done;
  const std::pair<int, int> stream{message.source, message.tag};
  uint64_t& next = next_[stream];
  if (message.seq != next) {
    early_[stream].emplace(message.seq, std::move(message));
    return done;
  }
  arriveLocked(std::move(message), done);
  ++next;
  auto waiting = early_.find(stream);
  while (waiting != early_.end() && !waiting->second.empty() &&
         waiting->second.begin()->first == next) {
    arriveLocked(std::move(waiting->second.begin()->second), done);
    waiting->second.erase(waiting->second.begin());
    ++next;
  }
  return done;
}

std::optional<PeerMessage> Mailbox::post(PeerReceive receive) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = messages_.begin(); it != messages_.end(); ++it) {
    if (!matches(receive, *it)) continue;
    PeerMessage m = std::move(*it);
    messages_.erase(it);
    return m;
  }
  receives_.push_back(std::move(receive));
  return std::nullopt;
}

std::vector<PeerReceive> Mailbox::takeReceives() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PeerReceive> out(std::make_move_iterator(receives_.begin()),
                               std::make_move_iterator(receives_.end()));
  receives_.clear();
  return out;
}

namespace {

void finishReceive(PeerReceive& receive, const Status& status, int source) {
  {
    std::lock_guard<std::mutex> lock(receive.handle->mu);
    receive.handle->source = source;
  }
  if (receive.entry.onDone) {
    try {
      receive.entry.onDone(status);
    } catch (...) {
      // A callback's failure is its own; the receive's status stands.
    }
  }
  receive.handle->finish(status);
  receive.handle->wake();
}

}  // namespace

void completeReceive(PeerReceive& receive, const PeerMessage& message) {
  const Request& q = receive.request;
  const size_t want = static_cast<size_t>(numElements(q.shape)) * elementSize(q.dtype);
  if (message.dtype != q.dtype || message.bytes->size() != want) {
    finishReceive(receive,
                  Status{ErrorCode::kMismatch,
                         "recv(tag " + std::to_string(message.tag) + "): rank " +
                             std::to_string(message.source) + " sent " +
                             describe(message.dtype, message.shape) + " but this rank receives " +
                             describe(q.dtype, q.shape) +
                             "; send and recv need the same dtype and number of elements"},
                  message.source);
    return;
  }
  if (want > 0) std::memcpy(receive.entry.output, message.bytes->data(), want);
  finishReceive(receive, Status::Ok(), message.source);
}

void failReceive(PeerReceive& receive, const Status& status) { finishReceive(receive, status, -1); }

}  // namespace kolo
