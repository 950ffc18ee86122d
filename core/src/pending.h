// One operation this rank submitted and that has not completed yet.
// Owned by the background thread once drained from the queue.
#pragma once

#include <memory>

#include "handle_state.h"
#include "message.h"

namespace kolo {

struct PendingOp {
  enum class State {
    kNew,     // not yet announced to the other ranks
    kCached,  // announced through its cache bit each cycle
    kSent,    // sent to the coordinator, waiting for a response
  };

  RequestMsg msg;
  Entry entry;
  std::shared_ptr<HandleState> handle;
  State state = State::kNew;
  int bit = -1;  // kCached: position in the response cache
};

}  // namespace kolo
