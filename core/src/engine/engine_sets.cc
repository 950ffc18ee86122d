// Engine: adding and removing process sets (the cycles' thread). A change is an
// internal operation of set 0, so every rank applies it at the same point
// of set 0's response order; the set's members connect (or close) its
// channels right there, before any of its cycles.
#include <algorithm>

#include "engine/engine_impl.h"

namespace kolo {

void Engine::Impl::changeProcessSetOnLoop(const Response& r) {
  ProcessSetState& global = *sets.at(0);
  const ProcessSetChange& change = r.setChange;
  Status status = Status::Ok();
  int added = -1;
  if (!change.ranks.empty()) {
    std::vector<int> ranks(change.ranks.begin(), change.ranks.end());
    const int existing = table.find(ranks);
    if (existing >= 0) {
      // Two ranks' add calls raced with their own earlier add of the same
      // ranks; refused everywhere alike.
      status = Status{ErrorCode::kInvalidArgument,
                      "add_process_set: " + processSetLabel(existing, ranks) +
                          " already has these ranks"};
    } else {
      added = nextSetId++;
      table.add(added, ranks);
      if (std::binary_search(ranks.begin(), ranks.end(), identity.rank)) {
        auto set = connectProcessSet(processSetContext(), added, std::move(ranks));
        set->executor->setTimeline(timeline.get());
        sets[added] = std::move(set);
      }
      log->debug("added {}", processSetLabel(added, table.info(added).ranks));
    }
  } else {
    const int id = change.removeId;
    auto known = table.all();
    const bool exists = id != 0 && std::any_of(known.begin(), known.end(),
                                               [&](const ProcessSetInfo& i) { return i.id == id; });
    if (!exists) {
      status = Status{ErrorCode::kInvalidArgument,
                      "remove_process_set: process set " + std::to_string(id) +
                          (id == 0 ? " is the global process set and cannot be removed"
                                   : " does not exist (never added, or removed)")};
    } else {
      auto it = sets.find(id);
      if (it != sets.end()) {
        ProcessSetState& set = *it->second;
        failSetOnLoop(set, Status{ErrorCode::kInvalidArgument,
                                  set.label + " was removed while this operation was pending"});
        const EngineStats& s = set.stats;
        retiredStats.coordinatorRounds += s.coordinatorRounds;
        retiredStats.cachedResponses += s.cachedResponses;
        retiredStats.responses += s.responses;
        retiredStats.fusedTensors += s.fusedTensors;
        retiredStats.backendCalls += s.backendCalls;
        retiredStats.bytesReduced += s.bytesReduced;
        retiredStats.stallChecks += s.stallChecks;
        sets.erase(it);  // closes its connections; every member does it here
        std::lock_guard<std::mutex> lock(mu);
        publishedSetStats.erase(id);
      }
      table.remove(id);
      log->debug("removed process set {}", id);
    }
  }
  auto it = global.pending.find(r.names[0]);
  if (it == global.pending.end()) return;  // joined: applied without asking
  {
    std::lock_guard<std::mutex> lock(it->second.handle->mu);
    it->second.handle->processSetId = added;
  }
  completeOnLoop(global, {it}, status);
}

}  // namespace kolo
