#include "c10d_engine.h"

#include <cstdint>
#include <mutex>
#include <utility>

namespace kolo::torch::detail {

namespace {

// The process's engine as the default group made it (weak: the groups own it).
struct ProcessEngine {
  std::mutex mu;
  std::weak_ptr<kolo::Engine> engine;
};

ProcessEngine& processEngine() {
  static ProcessEngine* registry = new ProcessEngine();  // never destroyed: groups outlive main
  return *registry;
}

// A range of tags for the group keyed key, the same on every member
// (FNV-1a of the key, so the members need not agree on anything else).
int tagBaseFor(const std::string& key) {
  uint32_t h = 2166136261u;
  for (unsigned char ch : key) {
    h ^= ch;
    h *= 16777619u;
  }
  constexpr uint32_t kRanges = (1u << 30) / kTagsPerGroup - 1;  // ranges above the default group's
  return static_cast<int>((h % kRanges + 1) * static_cast<uint32_t>(kTagsPerGroup));
}

}  // namespace

void setProcessEngine(const std::shared_ptr<kolo::Engine>& engine) {
  ProcessEngine& p = processEngine();
  std::lock_guard<std::mutex> lock(p.mu);
  p.engine = engine;
}

std::optional<GroupEngine> joinProcessEngine(const std::string& key,
                                             const std::vector<int64_t>& globalRanks, int groupRank,
                                             const kolo::ProcessSetLimits& limits) {
  std::shared_ptr<kolo::Engine> engine;
  {
    ProcessEngine& p = processEngine();
    std::lock_guard<std::mutex> lock(p.mu);
    engine = p.engine.lock();
  }
  if (!engine || !engine->failure().ok()) return std::nullopt;
  if (groupRank < 0 || groupRank >= static_cast<int>(globalRanks.size())) return std::nullopt;
  std::vector<int> ranks;
  for (size_t i = 0; i < globalRanks.size(); ++i) {
    const int64_t r = globalRanks[i];
    if (r < 0 || r >= engine->size() || (i > 0 && r <= globalRanks[i - 1])) return std::nullopt;
    ranks.push_back(static_cast<int>(r));
  }
  if (ranks[static_cast<size_t>(groupRank)] != engine->rank()) return std::nullopt;
  GroupEngine g;
  g.processSet = engine->addLocalProcessSet(key, ranks, limits);
  g.engine = std::move(engine);
  g.localSet = true;
  g.engineRanks = std::move(ranks);
  g.tagBase = tagBaseFor(key);
  g.tagLimit = kTagsPerGroup;
  return g;
}

}  // namespace kolo::torch::detail
