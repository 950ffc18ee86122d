// Where a kolo process group's operations run: on the process's engine
// (the default group's), as a process set of it, or on an engine of the
// group's own when it cannot share that one.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kolo/engine.h"

namespace kolo::torch::detail {

// Tags of one group on a shared engine lie below this; each group that
// joins the process's engine gets a range of its own above it, so that its
// messages never match another group's.
constexpr int kTagsPerGroup = 1 << 20;

// A group's place on an engine.
struct GroupEngine {
  std::shared_ptr<kolo::Engine> engine;
  // The set its operations carry (0: every rank of the engine).
  int processSet = 0;
  // A local set of a shared engine: the group removes it when it shuts down.
  bool localSet = false;
  // The engine's rank of each group rank (ascending).
  std::vector<int> engineRanks;
  // Added to the group's tags on the engine (0 on an engine of its own).
  int tagBase = 0;
  // Tags at or above this are refused (0: no limit of the group's own).
  int tagLimit = 0;
};

// Settings a group's operations run under that the engine decides for all
// of its sets.
struct GroupSettings {
  std::chrono::milliseconds timeout;         // the group's timeout
  std::chrono::milliseconds stallCheckTime;  // KOLO_STALL_CHECK_TIME when it was made
};

// Makes engine the process's engine, the one later groups join
// (joinProcessEngine), for as long as it lives: the default group's, made
// with settings.
void setProcessEngine(const std::shared_ptr<kolo::Engine>& engine, const GroupSettings& settings);

// The group of globalRanks (ascending, the job's ranks in group order) in
// which this process is groupRank, as a local process set keyed key of the
// process's engine; blocks until every member of the group joined it.
// Nothing (nullopt) when there is no process engine, when this process is
// not globalRanks[groupRank] of it, when the ranks are not ascending, or
// when the group's settings are stricter than the engine's (a shorter
// timeout, another stall check time): the engine stalls and times out all
// of its sets alike, so such a group needs an engine of its own.
std::optional<GroupEngine> joinProcessEngine(const std::string& key,
                                             const std::vector<int64_t>& globalRanks, int groupRank,
                                             const GroupSettings& settings);

}  // namespace kolo::torch::detail
