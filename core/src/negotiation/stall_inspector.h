// Stall inspector: finds tensors that some ranks submitted and others did
// not, for longer than KOLO_STALL_CHECK_TIME, and (with
// KOLO_STALL_SHUTDOWN_TIME) ends the job instead of letting it hang.
//
// The coordinator cannot see stalls by itself: cached tensors are announced
// only as bits of an AND, which hides who set them. So every check period
// rank 0 asks for a check round through a status bit of the cycle's AND
// (Controller), and at that cycle every rank calls runRound(): each sends
// its pending names and their ages to rank 0, which finds the stalls and
// broadcasts one report that every rank logs and acts on. No collective is
// added to cycles without a check.
//
// One per process set, over the set's control channel; ranks in messages
// are ranks of the job, and messages of a set other than the global one
// start with its label ("process set 2 (ranks 0,2): stall: ...").
//
// Threading: loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "comm/control_channel.h"
#include "kolo/config.h"
#include "wire/stall.h"

namespace kolo {

class StallInspector {
 public:
  // identity: this rank's place in the set; ranks: the job rank of each
  // set rank (empty: the same numbers); label: see above.
  StallInspector(const Config& config, const Identity& identity, std::vector<int> ranks = {},
                 std::string label = "");

  // False when both KOLO_STALL_CHECK_TIME and KOLO_STALL_SHUTDOWN_TIME are 0.
  bool enabled() const { return period_.count() > 0; }

  // Rank 0: whether to ask for a check round in this cycle.
  bool checkDue(std::chrono::steady_clock::time_point now);

  // Every rank, at the cycle whose AND showed the check request. joined:
  // ranks that have joined (they are never missing anything).
  StallReport runRound(comm::ControlChannel& channel, const std::vector<PendingAge>& mine,
                       const std::vector<bool>& joined);

  // Rank 0's analysis of every rank's pending list (exposed for tests).
  StallReport analyze(const std::vector<std::vector<PendingAge>>& perRank,
                      const std::vector<bool>& joined);


 private:
  const std::chrono::milliseconds checkTime_;
  const std::chrono::milliseconds shutdownTime_;
  const int rank_;
  const std::vector<int> ranks_;
  const std::string label_;
  const std::string shutdownSetting_;  // Config::stallShutdownSetting
  std::chrono::milliseconds period_{0};
  std::chrono::steady_clock::time_point lastCheck_;
  std::set<std::string> warned_;  // rank 0: stalls already reported
};

}  // namespace kolo
