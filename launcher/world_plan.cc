#include "world_plan.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <map>
#include <utility>

namespace kolo::launcher {
namespace {

bool survivor(const WorldCandidate& c) { return c.previousRank >= 0; }

}  // namespace

std::vector<PlannedMember> planWorld(std::vector<WorldCandidate> candidates,
                                     const std::vector<std::string>& hostOrder, int maxNp) {
  auto orderOf = [&](const std::string& host) {
    auto it = std::find(hostOrder.begin(), hostOrder.end(), host);
    return static_cast<int>(it - hostOrder.begin());
  };
  // Within a host and overall: survivors by previous rank, then new workers
  // by host order and slot.
  auto before = [&](const WorldCandidate& a, const WorldCandidate& b) {
    if (survivor(a) != survivor(b)) return survivor(a);
    if (survivor(a)) return a.previousRank < b.previousRank;
    if (a.host != b.host) return orderOf(a.host) < orderOf(b.host);
    if (a.slot != b.slot) return a.slot < b.slot;
    return a.worker < b.worker;
  };
  std::sort(candidates.begin(), candidates.end(), before);
  if (maxNp > 0 && static_cast<int>(candidates.size()) > maxNp) candidates.resize(maxNp);

  // Host order: by the lowest previous rank on it, then first-seen order.
  std::map<std::string, std::pair<int, int>> key;  // host -> (lowest previous rank, order)
  for (const auto& c : candidates) {
    auto [it, fresh] = key.emplace(c.host, std::make_pair(INT_MAX, orderOf(c.host)));
    if (survivor(c)) it->second.first = std::min(it->second.first, c.previousRank);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const WorldCandidate& a, const WorldCandidate& b) {
                     if (a.host == b.host) return false;  // keep the order within a host
                     return key[a.host] < key[b.host];
                   });

  std::vector<HostSlots> hosts;
  for (const auto& c : candidates) {
    if (hosts.empty() || hosts.back().host != c.host) hosts.push_back({c.host, 0});
    ++hosts.back().slots;
  }
  std::vector<PlannedMember> members;
  if (candidates.empty()) return members;
  std::vector<RankPlacement> placements =
      assignRanks(hosts, static_cast<int>(candidates.size()));
  for (size_t i = 0; i < candidates.size(); ++i) {
    members.push_back({candidates[i].worker, placements[i]});
  }
  return members;
}

}  // namespace kolo::launcher
