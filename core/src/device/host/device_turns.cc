#include "device/host/device_turns.h"

#include <algorithm>
#include <set>

#include "device/host/clique.h"

namespace kolo::device::host {

DeviceTurns::Cycle DeviceTurns::cycleLocked(const Request& request) const {
  // request waits for the holder of its device; that holder's clique waits
  // for its members that have not taken a device for it, each of which
  // may wait for the holder of its own device, and so on. A cycle closes
  // when this walk reaches request's clique.
  auto describe = [](const Request& r, const Holder& h) {
    return "device " + std::to_string(r.device) + " runs clique " + std::to_string(h.id) +
           "'s collective while clique " + std::to_string(r.id) + "'s (member " +
           std::to_string(r.rank) + ") waits for it";
  };
  const Holder& first = holders_[static_cast<size_t>(request.device)];
  std::vector<Cycle> todo{{describe(request, first), {request.clique, first.clique}}};
  std::set<const Clique*> seen;
  while (!todo.empty()) {
    Cycle step = todo.back();
    todo.pop_back();
    Clique* waitingClique = step.cliques.back();
    if (!seen.insert(waitingClique).second) continue;
    for (int m : waitingClique->missing()) {
      for (const Request& r : waiting_) {
        if (r.clique != waitingClique || r.rank != m) continue;
        const Holder& next = holders_[static_cast<size_t>(r.device)];
        if (next.clique == nullptr) continue;
        Cycle further{step.path + ", and " + describe(r, next), step.cliques};
        if (next.clique == request.clique) return further;
        further.cliques.push_back(next.clique);
        todo.push_back(std::move(further));
      }
    }
  }
  return {};
}

Status DeviceTurns::take(int device, Clique* clique, uint64_t id, int rank,
                         std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  Holder& slot = holders_.at(static_cast<size_t>(device));
  if (slot.clique == nullptr || slot.clique == clique) {
    // A clique's members on one device share it (ranks sharing a device).
    slot.clique = clique;
    slot.id = id;
    slot.ranks.push_back(rank);
    return Status::Ok();
  }
  const Request mine{device, clique, id, rank};
  const Cycle cycle = cycleLocked(mine);
  if (!cycle.cliques.empty()) {
    const std::string why =
        "host runtime: collectives issued in different orders on different devices (NCCL "
        "hangs here): " +
        cycle.path + "; every rank must issue the collectives of its communicators in one order";
    for (Clique* c : cycle.cliques) c->abort(why);
    return Status{ErrorCode::kInternal, why};
  }
  waiting_.push_back(mine);
  const bool got = freed_.wait_until(lock, deadline, [&] { return slot.clique == nullptr; });
  waiting_.erase(std::find_if(waiting_.begin(), waiting_.end(), [&](const Request& r) {
    return r.device == device && r.clique == clique && r.rank == rank;
  }));
  if (!got) {
    return Status{ErrorCode::kPeerFailure, "host collective: device " + std::to_string(device) +
                                               " stayed busy with clique " +
                                               std::to_string(slot.id) + "'s collective"};
  }
  slot.clique = clique;
  slot.id = id;
  slot.ranks = {rank};
  return Status::Ok();
}

void DeviceTurns::give(int device, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  Holder& slot = holders_.at(static_cast<size_t>(device));
  auto it = std::find(slot.ranks.begin(), slot.ranks.end(), rank);
  if (it != slot.ranks.end()) slot.ranks.erase(it);
  if (slot.ranks.empty()) {
    slot = Holder{};
    freed_.notify_all();
  }
}

uint64_t DeviceTurns::holder(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  return holders_.at(static_cast<size_t>(device)).id;
}

}  // namespace kolo::device::host
