// The sending side of point-to-point messages with one peer
// (engine_peers.cc): the pair's local process set and the messages sent
// before it was connected. Guarded by Engine::Impl::pairMu.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "execution/pending.h"

namespace kolo {

struct PeerPair {
  enum class State {
    kNone,        // never used
    kConnecting,  // asked for (by either side) and connecting
    kReady,       // the pair's set is installed (setId)
    kFailed,      // it could not connect (failure)
  };
  State state = State::kNone;
  int setId = -1;
  Status failure;
  std::vector<PendingOp> waiting;  // sent while connecting, in order
  std::map<int, uint64_t> sent;    // messages sent so far, by tag
  std::thread connector;           // connects the pair's set (joined at shutdown)
};

// The key of the local process set of ranks a and b (any order).
std::string pairKey(int a, int b);
// Whether key is such a pair's.
bool isPairKey(const std::string& key);

}  // namespace kolo
