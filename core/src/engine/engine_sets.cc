// Engine: adding and removing process sets (the cycles' thread). A change is an
// internal operation of set 0, so every rank applies it at the same point
// of set 0's response order; the set's members connect (or close) its
// channels right there, before any of its cycles. A local set's change is
// submitted by its members alone (they connected beforehand, on their
// callers' threads) and applied by them alone, at that same kind of point.
#include <algorithm>

#include "engine/engine_impl.h"

namespace kolo {

void Engine::Impl::retireSetOnLoop(std::map<int, std::unique_ptr<ProcessSetState>>::iterator it,
                                   const Status& why) {
  ProcessSetState& set = *it->second;
  const int id = set.id;
  failSetOnLoop(set, why);
  addCounters(retiredStats, set.stats);
  sets.erase(it);  // closes its connections; every member does it here
  {
    std::lock_guard<std::mutex> lock(mu);
    publishedSetStats.erase(id);
  }
  table.remove(id);
}

void Engine::Impl::installSetOnLoop(std::unique_ptr<ProcessSetState> set) {
  set->executor->setTimeline(timeline.get());
  set->order = nextOrder++;
  const int id = set->id;
  table.add(id, set->ranks, set->key);
  sets[id] = std::move(set);
}

Status Engine::Impl::changeLocalProcessSetOnLoop(const ProcessSetChange& change, int& changed) {
  const std::vector<int> ranks(change.ranks.begin(), change.ranks.end());
  if (!std::binary_search(ranks.begin(), ranks.end(), identity.rank)) return Status::Ok();
  if (change.pairRequest) {
    pairRequestedOnLoop(change);
    return Status::Ok();
  }
  const std::string label = localProcessSetLabel(change.localKey, ranks);
  if (change.localRemove) {
    const int id = table.findLocal(change.localKey);
    auto it = sets.find(id);
    if (it == sets.end()) return Status::Ok();  // a stall ended it meanwhile
    changed = id;
    retireSetOnLoop(it, Status{ErrorCode::kInvalidArgument,
                               label + " was removed while this operation was pending"});
    log->debug("removed {}", label);
    return Status::Ok();
  }
  std::unique_ptr<ProcessSetState> set;
  {
    std::lock_guard<std::mutex> lock(localMu);
    auto it = localConnected.find(change.localKey);
    if (it != localConnected.end()) {
      set = std::move(it->second);
      localConnected.erase(it);
    }
  }
  KOLO_ENFORCE(set != nullptr, label + " was installed but this rank never connected it");
  changed = set->id;
  const bool pair = isPairKey(set->key);
  ProcessSetState& installed = *set;
  installSetOnLoop(std::move(set));
  if (pair) pairInstalledOnLoop(installed);
  log->debug("added {} as local id {}", label, changed);
  return Status::Ok();
}

void Engine::Impl::changeProcessSetOnLoop(const Response& r) {
  ProcessSetState& global = *sets.at(0);
  const ProcessSetChange& change = r.setChange;
  Status status = Status::Ok();
  int added = -1;
  if (change.local()) {
    status = changeLocalProcessSetOnLoop(change, added);
  } else if (!change.ranks.empty()) {
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
      if (std::binary_search(ranks.begin(), ranks.end(), identity.rank)) {
        installSetOnLoop(connectProcessSet(processSetContext(), added, ranks));
      } else {
        table.add(added, ranks);
      }
      log->debug("added {}", processSetLabel(added, ranks));
    }
  } else {
    const int id = change.removeId;
    auto known = table.all();
    const bool exists =
        id != 0 && std::any_of(known.begin(), known.end(), [&](const ProcessSetInfo& i) {
          return i.id == id && i.key.empty();
        });
    if (!exists) {
      status = Status{ErrorCode::kInvalidArgument,
                      "remove_process_set: process set " + std::to_string(id) +
                          (id == 0 ? " is the global process set and cannot be removed"
                                   : " does not exist (never added, or removed)")};
    } else {
      auto it = sets.find(id);
      if (it != sets.end()) {
        retireSetOnLoop(
            it, Status{ErrorCode::kInvalidArgument,
                       it->second->label + " was removed while this operation was pending"});
      } else {
        table.remove(id);
      }
      log->debug("removed process set {}", id);
    }
  }
  auto it = global.pending.find(r.names[0]);
  if (it == global.pending.end()) return;  // joined, or outside a local set
  {
    std::lock_guard<std::mutex> lock(it->second.handle->mu);
    it->second.handle->processSetId = added;
  }
  completeOnLoop(global, {it}, status);
}

}  // namespace kolo
