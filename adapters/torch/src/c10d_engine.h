// Where a kolo process group's operations run: on the process's engine
// (the default group's), as a process set of it, or on an engine of the
// group's own when it cannot share that one.
#pragma once

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

// Makes engine the process's engine, the one later groups join
// (joinProcessEngine), for as long as it lives: the default group's.
void setProcessEngine(const std::shared_ptr<kolo::Engine>& engine);

// The group of globalRanks (ascending, the job's ranks in group order) in
// which this process is groupRank, as a local process set keyed key of the
// process's engine, with the group's own timeout and stall times (limits);
// blocks until every member of the group joined it. Nothing (nullopt) when
// there is no process engine (or it failed), when this process is not
// globalRanks[groupRank] of it, or when the ranks are not ascending: a set's
// ranks are in the engine's order, so such a group needs an engine of its
// own.
std::optional<GroupEngine> joinProcessEngine(const std::string& key,
                                             const std::vector<int64_t>& globalRanks, int groupRank,
                                             const kolo::ProcessSetLimits& limits);

}  // namespace kolo::torch::detail
