// Point-to-point messages on the receiving side: the messages that reached
// this rank and no receive took yet, and the receives waiting for one.
// Messages arrive in the order this rank's loop executes them (each pair's
// negotiated order, the pairs interleaved as their cycles run); those of
// one sender with one tag are put back in the order sent (a cycle may
// negotiate several in any order). A receive takes the first that matches
// it: from its peer, or from any peer (Engine::kAnySource), with its tag.
//
// Threading: any thread; nothing runs under its lock (what deliver and
// post return is completed by their caller).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "execution/handle_state.h"
#include "kolo/engine.h"

namespace kolo {

// A message that reached this rank.
struct PeerMessage {
  int source = -1;  // the sending rank (of the job)
  int tag = 0;
  uint64_t seq = 0;  // its place among source's messages to this rank with tag
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  std::shared_ptr<std::vector<char>> bytes;
};

// A receive posted and not matched yet.
struct PeerReceive {
  int source = -1;  // Engine::kAnySource: any rank
  int tag = 0;
  Request request;  // dtype and shape of the tensor it receives into
  Entry entry;
  std::shared_ptr<HandleState> handle;
};

class Mailbox {
 public:
  // A message arrived: the receives it and the messages it was waiting
  // for complete, each with the message it takes (taken out); the others
  // are kept for later receives.
  std::vector<std::pair<PeerReceive, PeerMessage>> deliver(PeerMessage message);
  // A receive posted: the first kept message it matches, taken out, or
  // none (the receive waits for one).
  std::optional<PeerMessage> post(PeerReceive receive);
  // Every waiting receive, taken out (the engine stopped: they fail).
  std::vector<PeerReceive> takeReceives();

 private:
  static bool matches(const PeerReceive& r, const PeerMessage& m) {
    return (r.source == Engine::kAnySource || r.source == m.source) && r.tag == m.tag;
  }
  std::mutex mu_;
  // A message in order: to the first receive it matches, or kept.
  void arriveLocked(PeerMessage message, std::vector<std::pair<PeerReceive, PeerMessage>>& done);
  std::deque<PeerMessage> messages_;
  std::deque<PeerReceive> receives_;
  // By (source, tag): the seq of the next message in order, and those
  // that came before it.
  std::map<std::pair<int, int>, uint64_t> next_;
  std::map<std::pair<int, int>, std::map<uint64_t, PeerMessage>> early_;
};

// Completes receive with message: copies its bytes into the receive's
// output, or fails it (Mismatch) when dtype or size differ, naming both
// sides; runs the entry's callback and wakes the waiters. Any thread.
void completeReceive(PeerReceive& receive, const PeerMessage& message);
// Fails receive with status (any thread).
void failReceive(PeerReceive& receive, const Status& status);

}  // namespace kolo
