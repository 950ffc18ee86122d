// Negotiation of one process set: decides, identically on every rank of
// the set, which responses run this cycle and in what order. The set's rank
// 0 is the coordinator. Shutdown, abort and autotuning travel only in the
// global set's cycles (the engine never sets them for other sets).
//
// One cycle: a bitwise-AND allreduce of [status word | cache bits]. Cached
// tensors whose bit is set everywhere are ready (steady state ends here).
// Status bits say when some rank has uncached requests (then requests are
// gathered to rank 0, which validates, fuses and broadcasts responses),
// invalidated cache entries (then an OR allreduce agrees on what to evict),
// or a shutdown/abort (then every rank learns who stopped and why), a stall
// check round requested by rank 0 (then the engine runs it right after this
// cycle, see StallInspector), or a tunables change decided by rank 0's
// autotuner (then rank 0 broadcasts it and every rank applies it before
// fusing this cycle's responses). A busy bit tells idle ranks that some rank
// has work, in a set they may not belong to, so that they keep cycling at
// full rate instead of backing off (their set 0 cycles pace every set's).
// Loop thread only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autotune/autotuner.h"
#include "comm/control_channel.h"
#include "kolo/config.h"
#include "kolo/engine.h"
#include "wire/message.h"
#include "negotiation/message_table.h"
#include "negotiation/response_cache.h"
#include "wire/control.h"

namespace kolo {

struct CycleInput {
  std::vector<int> readyBits;             // cache bits this rank has pending
  std::vector<RequestMsg> uncached;       // requests to send to the coordinator
  std::vector<int> invalidBits;           // cache entries this rank found stale
  bool joined = false;                    // this rank is joined: ready for every bit
  bool shutdown = false;                  // this rank asks to stop
  bool abort = false;                     // this rank failed with abortMessage
  std::string abortMessage;
  bool stallCheckDue = false;             // rank 0: ask for a stall check round
  std::optional<autotune::Decision> tune; // rank 0: tunables to apply everywhere
  bool busy = false;                      // this rank has work (in any process set)
};

// How the job ends when some rank stops (shutdown or abort).

struct CycleOutput {
  std::vector<Response> cached;    // from the cache, fused; run first
  std::vector<Response> uncached;  // from the coordinator; run second
  std::vector<int> evictedBits;    // invalidated on every rank this cycle
  bool stallCheck = false;         // every rank runs a stall check round now
  bool anyBusy = false;            // some rank set CycleInput::busy
  std::optional<autotune::Decision> tuned;  // applied on every rank this cycle
  bool stop = false;
  StopInfo stopInfo;
};

class Controller {
 public:
  // identity: this rank's place in the set; ranks: the job rank of each
  // set rank and label ("process set 2 (ranks 0,2)", empty for the global
  // set), for the coordinator's messages.
  Controller(const Config& config, const Identity& identity,
             std::unique_ptr<comm::ControlChannel> channel, ResponseCache& cache,
             EngineStats& stats, Tunables& tunables, std::vector<int> ranks,
             std::string label);

  CycleOutput runCycle(const CycleInput& input);

  // The coordinator's view of tensors some ranks have not submitted.
  std::vector<MessageTable::Waiting> waiting() const;

  comm::ControlChannel& channel() { return *channel_; }

 private:
  std::vector<Response> coordinate(const std::vector<RequestMsg>& mine);
  StopInfo exchangeStop(const CycleInput& input);
  // Broadcasts rank 0's decision and applies it; turning the cache off
  // evicts every entry (identically on every rank).
  autotune::Decision applyTune(const CycleInput& input, CycleOutput& out);

  const Config& config_;
  const Identity& identity_;
  std::unique_ptr<comm::ControlChannel> channel_;
  ResponseCache& cache_;
  EngineStats& stats_;
  Tunables& tunables_;  // the engine's; changed only by applyTune
  MessageTable table_;
  std::vector<uint64_t> bits_;  // reused every cycle
};

}  // namespace kolo
