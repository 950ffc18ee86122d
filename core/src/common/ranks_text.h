// How errors name ranks: "rank 1", "ranks 0, 2"; a long list in ranges,
// "ranks 0-255, 300, 302-511", so that a job of thousands of ranks gets a
// line, not a page.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kolo {

// "[3,1,4]": a list of numbers (rank lists, split sizes) as messages show it.
template <typename T>
std::string bracketed(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// Lists of up to this many ranks are written out one by one.
constexpr size_t kRanksListedOneByOne = 8;

// "0, 2"; a longer list folds each run of consecutive ranks: "0-3, 5, 7-9".
// separator: between entries (kolorun's messages use ",").
inline std::string joinRanks(const std::vector<int>& ranks, const char* separator = ", ") {
  const bool fold = ranks.size() > kRanksListedOneByOne;
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t last = i;
    while (fold && last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
    s += (i ? separator : "") + std::to_string(ranks[i]);
    if (last > i) s += "-" + std::to_string(ranks[last]);
    i = last + 1;
  }
  return s;
}

// "rank 1" or "ranks 0, 2"
inline std::string ranksPhrase(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + joinRanks(ranks);
}

}  // namespace kolo
