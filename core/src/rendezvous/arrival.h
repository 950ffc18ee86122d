// Naming the ranks that never published their start-up key: what every
// batched start-up read (Store::multiGet) reports when it times out.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/ranks_text.h"
#include "kolo/store.h"

namespace kolo::rendezvous {

// The ranks[i] whose keys[i] is not in the store (one request).
inline std::vector<int> ranksWithoutKey(Store& store, const std::vector<std::string>& keys,
                                        const std::vector<int>& ranks) {
  const std::vector<bool> present = store.checkMany(keys);
  std::vector<int> missing;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!present[i]) missing.push_back(ranks[i]);
  }
  return missing;
}

// "ranks 3-5 have not arrived within 60000 ms (never started, ...)".
inline std::string notArrived(const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
  return ranksPhrase(ranks) + (ranks.size() == 1 ? " has" : " have") + " not arrived within " +
         std::to_string(timeout.count()) + " ms (never started, or stopped before setting up)";
}

}  // namespace kolo::rendezvous
