// The helpers of the driver-worker protocol (kolo/elastic_world.h); the
// world record's encoding is wire/world.cc.
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <tuple>
#include <utility>

#include "rendezvous/peer_failure.h"
#include "kolo/elastic_world.h"
#include "kolo/error.h"

namespace kolo::elastic {

const WorldMember* World::find(int64_t worker) const {
  for (const auto& m : members) {
    if (m.worker == worker) return &m;
  }
  return nullptr;
}


std::vector<char> textValue(const std::string& text) { return {text.begin(), text.end()}; }

std::string textOf(const std::vector<char>& value) { return {value.begin(), value.end()}; }

int64_t integerOf(const std::vector<char>& value, const std::string& key) {
  std::string text = textOf(value);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) {
    throw Internal("elastic store key '" + key + "' holds '" + text + "', not an integer");
  }
  return v;
}

void publishLostRank(Store& root, int64_t version, int rank, const std::string& why) {
  // Each member builds exactly one engine on the world's fresh prefix, so
  // every engine of the world is generation 1 there (engine.cc's
  // generationStore: "kolo/<generation>/"), and publishAbort writes where
  // diagnoseFailure looks.
  try {
    PrefixStore engineKeys(keys::worldPrefix(version) + "kolo/1/",
                           std::shared_ptr<Store>(&root, [](Store*) {}));
    publishAbort(engineKeys, rank, why);
  } catch (...) {
  }
}

}  // namespace kolo::elastic
