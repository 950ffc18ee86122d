// How errors name ranks: "rank 1", "ranks 0, 2".
#pragma once

#include <string>
#include <vector>

namespace kolo {

// "0, 2"
inline std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// "rank 1" or "ranks 0, 2"
inline std::string ranksPhrase(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + joinRanks(ranks);
}

}  // namespace kolo
