#include "comm/shm/host.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <utility>

#include "common/ranks_text.h"
#include "rendezvous/arrival.h"
#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

std::string firstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string inodeOf(const char* path) {
  struct stat st {};
  if (stat(path, &st) != 0) return "?";
  return std::to_string(static_cast<unsigned long long>(st.st_dev)) + ":" +
         std::to_string(static_cast<unsigned long long>(st.st_ino));
}

}  // namespace

bool HostLayout::uniform() const {
  for (const auto& h : hosts) {
    if (h.size() != hosts.front().size()) return false;
  }
  return true;
}

int HostLayout::localRank(int rank) const {
  const auto& ranks = hosts[hostOf[rank]];
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

std::string HostLayout::describe() const {
  if (uniform()) {
    return std::to_string(hostCount()) + (hostCount() == 1 ? " host of " : " hosts of ") +
           std::to_string(hosts.front().size()) + (hosts.front().size() == 1 ? " rank" : " ranks");
  }
  std::string text = "hosts of ";
  for (size_t h = 0; h < hosts.size(); ++h) {
    text += (h == 0                  ? ""
             : h + 1 == hosts.size() ? " and "
                                     : ", ") +
            std::to_string(hosts[h].size());
  }
  return text + " ranks";
}

std::string hostKey() {
  std::string boot = firstLine("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) {
    // No boot id: fall back to the host name, which is less strict.
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    boot = std::string("host ") + name;
  }
  return boot + " net " + inodeOf("/proc/self/ns/net") + " pid " + inodeOf("/proc/self/ns/pid") +
         " shm " + inodeOf("/dev/shm");
}

HostLayout layoutOf(const std::vector<std::string>& keys) {
  HostLayout layout;
  std::map<std::string, int> hostByKey;
  layout.hostOf.resize(keys.size());
  for (size_t r = 0; r < keys.size(); ++r) {
    auto [it, fresh] = hostByKey.emplace(keys[r], static_cast<int>(layout.hosts.size()));
    if (fresh) layout.hosts.emplace_back();
    layout.hostOf[r] = it->second;
    layout.hosts[it->second].push_back(static_cast<int>(r));
  }
  return layout;
}

namespace {

// Reads every other rank's host key in one request, waiting until all are
// published: the first point where the ranks of a job meet. A rank that
// never came is named, not its key.
std::vector<std::vector<char>> readHostKeys(const BackendArgs& args) {
  const Identity& id = args.identity;
  std::vector<std::string> keys;
  std::vector<int> ranks;
  for (int r = 0; r < id.size; ++r) {
    if (r == id.rank) continue;
    keys.push_back("host/" + std::to_string(r));
    ranks.push_back(r);
  }
  try {
    return args.store->multiGet(keys, args.config.timeout);
  } catch (const Timeout&) {
    const std::vector<int> missing = rendezvous::ranksWithoutKey(*args.store, keys, ranks);
    if (missing.empty()) throw;
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%.1f",
                  std::chrono::duration<double>(args.config.timeout).count());
    throw Timeout(ranksPhrase(missing) + " of " + std::to_string(id.size) +
                  (missing.size() == 1 ? " has" : " have") + " not arrived within " + limit +
                  " s (KOLO_TIMEOUT): " + (missing.size() == 1 ? "it" : "they") +
                  " never wrote to the rendezvous store. Start every rank of the job (or raise "
                  "KOLO_TIMEOUT if they start late)");
  }
}

}  // namespace

HostLayout exchangeLayout(const BackendArgs& args) {
  const Identity& id = args.identity;
  const std::string mine =
      args.config.hostKeyOverride ? args.config.hostKeyOverride(id.rank) : hostKey();
  KOLO_CHECK_ARG(!mine.empty() && mine.size() <= kMaxHostKeyBytes,
                 "host key of " + std::to_string(mine.size()) + " bytes (1 to " +
                     std::to_string(kMaxHostKeyBytes) + " expected)");
  std::vector<std::string> keys(id.size);
  keys[id.rank] = mine;
  if (id.size > 1) {
    args.store->set("host/" + std::to_string(id.rank), std::vector<char>(mine.begin(), mine.end()));
    const auto values = readHostKeys(args);
    for (int r = 0; r < id.size; ++r) {
      if (r == id.rank) continue;
      const auto& value = values[r < id.rank ? r : r - 1];
      KOLO_CHECK_ARG(!value.empty() && value.size() <= kMaxHostKeyBytes,
                     "the rendezvous store holds a malformed host key for rank " +
                         std::to_string(r) + " (" + std::to_string(value.size()) + " bytes)");
      keys[r].assign(value.begin(), value.end());
    }
  }
  return layoutOf(keys);
}

}  // namespace kolo::comm::shm

namespace kolo {

std::string hostKey() { return comm::shm::hostKey(); }

}  // namespace kolo
