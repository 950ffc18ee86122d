#include "kolo/identity.h"

#include <algorithm>
#include <cstddef>

#include "kolo/error.h"

namespace kolo {

Identity identityFromHosts(int rank, const std::vector<std::string>& hosts) {
  const int size = static_cast<int>(hosts.size());
  KOLO_CHECK_ARG(rank >= 0 && rank < size, "identityFromHosts: rank " + std::to_string(rank) +
                                               " of " + std::to_string(size) + " hosts");
  Identity id;
  id.rank = rank;
  id.size = size;
  const std::string& mine = hosts[static_cast<size_t>(rank)];
  id.localRank = 0;
  id.localSize = 0;
  std::vector<std::string> hostOrder;  // hosts in order of their lowest rank
  for (int i = 0; i < size; ++i) {
    const std::string& host = hosts[static_cast<size_t>(i)];
    if (std::find(hostOrder.begin(), hostOrder.end(), host) == hostOrder.end()) {
      hostOrder.push_back(host);
    }
    if (host != mine) continue;
    if (i < rank) ++id.localRank;
    ++id.localSize;
  }
  // Cross rank: among the ranks with the same local rank, in host order.
  id.crossRank = 0;
  id.crossSize = 0;
  for (const std::string& host : hostOrder) {
    int local = 0;
    for (int i = 0; i < size; ++i) {
      if (hosts[static_cast<size_t>(i)] != host) continue;
      if (local++ != id.localRank) continue;
      if (host == mine) id.crossRank = id.crossSize;
      ++id.crossSize;
    }
  }
  return id;
}

}  // namespace kolo
