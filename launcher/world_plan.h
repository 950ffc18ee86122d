// Who gets which rank in a new world. Pure function, tested without
// processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hosts.h"

namespace kolo::launcher {

// A worker that may join the next world: a survivor of the previous one
// (previousRank >= 0) or a new worker (previousRank = -1).
struct WorldCandidate {
  int64_t worker = 0;
  std::string host;
  int slot = 0;  // the worker's slot on its host (its start order there)
  int previousRank = -1;
};

struct PlannedMember {
  int64_t worker = 0;
  RankPlacement placement;  // rank, size, local and cross rank/size, host
};

// Ranks are contiguous per host. Hosts holding survivors come first, ordered
// by their lowest previous rank; then the other hosts in hostOrder (first
// seen first). On a host, survivors come first (by previous rank), then new
// workers (by slot). So rank 0 is the survivor that was lowest before: it
// holds the state every rank syncs from. At most maxNp members; new
// workers are dropped first.
std::vector<PlannedMember> planWorld(std::vector<WorldCandidate> candidates,
                                     const std::vector<std::string>& hostOrder, int maxNp);

}  // namespace kolo::launcher
