// One operation this rank submitted and that has not completed yet.
// Owned by the background thread once drained from the queue.
#pragma once

#include <chrono>
#include <memory>

#include "execution/handle_state.h"
#include "wire/message.h"

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

  // Set by the caller's thread at enqueue: stall ages, timeline start.
  std::chrono::steady_clock::time_point enqueued = std::chrono::steady_clock::now();

  // Timeline (loop thread): whether this op's spans are open in the running
  // timeline, its row, and which negotiation-phase span is open.
  enum class Span : uint8_t { kNone, kNegotiate, kQueue };
  bool traced = false;
  int row = 0;
  Span span = Span::kNone;
};

}  // namespace kolo
