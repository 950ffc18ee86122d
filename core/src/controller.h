// Negotiation: decides, identically on every rank, which responses run
// this cycle and in what order. Rank 0 is the coordinator.
//
// One cycle: a bitwise-AND allreduce of [status word | cache bits]. Cached
// tensors whose bit is set everywhere are ready (steady state ends here).
// Status bits say when some rank has uncached requests (then requests are
// gathered to rank 0, which validates, fuses and broadcasts responses),
// invalidated cache entries (then an OR allreduce agrees on what to evict),
// or a shutdown/abort (then every rank learns who stopped and why).
// Loop thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/control_channel.h"
#include "kolo/config.h"
#include "kolo/engine.h"
#include "message.h"
#include "message_table.h"
#include "response_cache.h"

namespace kolo {

struct CycleInput {
  std::vector<int> readyBits;             // cache bits this rank has pending
  std::vector<RequestMsg> uncached;       // requests to send to the coordinator
  std::vector<int> invalidBits;           // cache entries this rank found stale
  bool joined = false;                    // this rank is joined: ready for every bit
  bool shutdown = false;                  // this rank asks to stop
  bool abort = false;                     // this rank failed with abortMessage
  std::string abortMessage;
};

// How the job ends when some rank stops (shutdown or abort).
struct StopInfo {
  std::vector<int> abortedRanks;
  std::vector<std::string> abortMessages;  // parallel to abortedRanks
  std::vector<int> shutdownRanks;
};

struct CycleOutput {
  std::vector<Response> cached;    // from the cache, fused; run first
  std::vector<Response> uncached;  // from the coordinator; run second
  std::vector<int> evictedBits;    // invalidated on every rank this cycle
  bool stop = false;
  StopInfo stopInfo;
};

class Controller {
 public:
  Controller(const Config& config, const Identity& identity,
             std::unique_ptr<comm::ControlChannel> channel, ResponseCache& cache,
             EngineStats& stats);

  CycleOutput runCycle(const CycleInput& input);

  // The coordinator's view of tensors some ranks have not submitted.
  std::vector<MessageTable::Waiting> waiting() const;

  comm::ControlChannel& channel() { return *channel_; }

 private:
  std::vector<Response> coordinate(const std::vector<RequestMsg>& mine);
  StopInfo exchangeStop(const CycleInput& input);

  const Config& config_;
  const Identity& identity_;
  std::unique_ptr<comm::ControlChannel> channel_;
  ResponseCache& cache_;
  EngineStats& stats_;
  MessageTable table_;
  std::vector<uint64_t> bits_;  // reused every cycle
};

}  // namespace kolo
