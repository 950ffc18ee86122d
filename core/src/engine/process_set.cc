#include "engine/process_set.h"

#include "engine/peer_pair.h"

#include <algorithm>

#include "comm/cuda/device_set.h"
#include "comm/select.h"
#include "kolo/build_config.h"
#include "kolo/error.h"
#include "kolo/identity.h"

namespace kolo {
namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::vector<int> messageRanks(int id, const std::vector<int>& ranks, const Config& config) {
  if (id != 0 || config.rankNames.empty()) return ranks;
  KOLO_CHECK_ARG(config.rankNames.size() == ranks.size(),
                 "Config::rankNames has " + std::to_string(config.rankNames.size()) +
                     " entries for " + std::to_string(ranks.size()) + " ranks");
  return config.rankNames;
}

std::string processSetLabel(int id, const std::vector<int>& ranks) {
  return "process set " + std::to_string(id) + " (ranks " + rankList(ranks) + ")";
}

std::string localProcessSetLabel(const std::string& key, const std::vector<int>& ranks) {
  return "process set '" + key + "' (ranks " + rankList(ranks) + ")";
}

std::vector<int> checkedProcessSetRanks(std::vector<int> ranks, int size, const char* what) {
  if (ranks.empty()) throw InvalidArgument(std::string(what) + ": a process set needs ranks");
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size) {
      throw InvalidArgument(std::string(what) + ": rank " + std::to_string(ranks[i]) +
                            " is not a rank of this job (size " + std::to_string(size) + ")");
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) {
      throw InvalidArgument(std::string(what) + ": rank " + std::to_string(ranks[i]) +
                            " is listed twice");
    }
  }
  return ranks;
}

// ---- ProcessSetTable ----------------------------------------------------------

void ProcessSetTable::add(int id, std::vector<int> ranks, std::string key) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_[id] = Entry{std::move(ranks), false, std::move(key)};
}

void ProcessSetTable::remove(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_.erase(id);
}

void ProcessSetTable::end(int id, Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_.erase(id);
  ended_[id] = std::move(why);
}

std::optional<Status> ProcessSetTable::endedBy(int id, const std::string& what) const {
  std::lock_guard<std::mutex> lock(mu_);
  return endedLocked(id, what);
}

std::optional<Status> ProcessSetTable::endedLocked(int id, const std::string& what) const {
  auto ended = ended_.find(id);
  if (ended == ended_.end()) return std::nullopt;
  // Local ids are never reused: this is the set the stall ended.
  Status why = ended->second;
  why.message = what + ": the set was ended by this stall: " + why.message;
  return why;
}

ProcessSetInfo ProcessSetTable::infoLocked(int id, const Entry& e) const {
  ProcessSetInfo info;
  info.id = id;
  info.ranks = e.ranks;
  info.key = e.key;
  auto it = std::lower_bound(e.ranks.begin(), e.ranks.end(), rank_);
  if (it != e.ranks.end() && *it == rank_) info.rank = static_cast<int>(it - e.ranks.begin());
  return info;
}

ProcessSetInfo ProcessSetTable::info(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    throw InvalidArgument("process set " + std::to_string(id) +
                          " does not exist (never added, or removed)");
  }
  return infoLocked(id, it->second);
}

std::vector<ProcessSetInfo> ProcessSetTable::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProcessSetInfo> out;
  for (const auto& [id, e] : sets_) out.push_back(infoLocked(id, e));
  return out;
}

int ProcessSetTable::find(const std::vector<int>& ranks) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : sets_) {
    if (e.key.empty() && e.ranks == ranks) return id;
  }
  return -1;
}

int ProcessSetTable::findLocal(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : sets_) {
    if (!e.key.empty() && e.key == key) return id;
  }
  return -1;
}

ProcessSetInfo ProcessSetTable::memberOf(int id, const std::string& what) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    if (auto why = endedLocked(id, what)) why->throwIfError();
    throw InvalidArgument(what + ": process set " + std::to_string(id) +
                          " does not exist (never added, or removed)");
  }
  ProcessSetInfo info = infoLocked(id, it->second);
  if (!info.included()) {
    throw InvalidArgument(what + ": this rank (" + std::to_string(rank_) +
                          ") is not a member of " + processSetLabel(id, info.ranks) +
                          "; only its members may run operations on it");
  }
  return info;
}

bool ProcessSetTable::joined(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it != sets_.end() && it->second.joined;
}

bool ProcessSetTable::anyJoined() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : sets_) {
    if (e.joined) return true;
  }
  return false;
}

void ProcessSetTable::setJoined(int id, bool joined) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it != sets_.end()) it->second.joined = joined;
}

// ---- ProcessSetState ------------------------------------------------------------

ProcessSetState::ProcessSetState(int id_, std::vector<int> ranks_, Identity identity_,
                                 Config config_, std::string key_)
    : config(std::move(config_)),
      id(id_),
      ranks(std::move(ranks_)),
      identity(identity_),
      key(std::move(key_)),
      label(id_ == 0      ? ""
            : key.empty() ? processSetLabel(id_, ranks)
                          : localProcessSetLabel(key, ranks)),
      // A pair's messages are named anew each time: nothing to cache.
      cache(isPairKey(key) ? 0 : config.cacheCapacity),
      stall(config, identity, messageRanks(id_, ranks, config), label),
      joined(ranks.size(), false) {}

Identity processSetIdentity(const Identity& job, const std::vector<int>& ranks,
                            const std::vector<std::string>& hosts) {
  std::vector<std::string> memberHosts;
  memberHosts.reserve(ranks.size());
  for (int r : ranks) memberHosts.push_back(hosts.at(static_cast<size_t>(r)));
  const int rank =
      static_cast<int>(std::lower_bound(ranks.begin(), ranks.end(), job.rank) - ranks.begin());
  return identityFromHosts(rank, memberHosts);
}

std::unique_ptr<ProcessSetState> connectProcessSet(const ProcessSetContext& ctx, int id,
                                                   std::vector<int> ranks, const std::string& key) {
  Identity identity = ctx.job;
  std::shared_ptr<Store> store = ctx.store;
  std::vector<int> worldRanks;
  if (id != 0) {
    identity = processSetIdentity(ctx.job, ranks, ctx.hosts);
    const std::string prefix =
        key.empty() ? "ps/" + std::to_string(id) + "/" : "ps/local/" + key + "/";
    store = std::make_shared<PrefixStore>(prefix, ctx.store);
    worldRanks = ranks;
  }
  auto set = std::make_unique<ProcessSetState>(id, std::move(ranks), identity, ctx.config, key);
  const Config& config = set->config;  // lives as long as the set
  comm::BackendArgs controlArgs{config, set->identity,
                                std::make_shared<PrefixStore>("control/", store),
                                ctx.localAddress, worldRanks};
  comm::BackendArgs dataArgs{config, set->identity,
                             std::make_shared<PrefixStore>("data/", store), ctx.localAddress,
                             worldRanks};
  try {
    set->controller = std::make_unique<Controller>(
        config, set->identity, comm::createControlPlane(controlArgs), set->cache, set->stats,
        ctx.tunables, messageRanks(id, set->ranks, config), set->label);
    // Every set (set 0 included) chooses its CPU planes by where its own
    // ranks run: shared memory on one host, hierarchical across uniform
    // hosts. The GPU data plane connects at the set's first CUDA response,
    // under "gpu/" beside the CPU data plane's keys.
    GpuPath::Factory gpu;
    if (ctx.gpuDevices) {
      gpu = [&config = set->config, &identity = set->identity, dataArgs,
             controller = set->controller.get(), devices = ctx.gpuDevices] {
        comm::BackendArgs args{config, identity, dataArgs.store, dataArgs.localAddress,
                               dataArgs.worldRanks};
        args.broadcast = [controller](std::vector<char>& bytes, int root) {
          controller->channel().broadcast(bytes, root);
        };
        return comm::createGpuOps(config.gpuOperations, args, devices);
      };
    }
    set->executor = std::make_unique<Executor>(
        set->identity,
        comm::createCpuDataPlane(dataArgs, &set->dataPlane, &set->dataPlaneFellBack),
        set->stats, std::move(gpu), ctx.job.localRank);
  } catch (const Timeout& e) {
    throw Timeout(set->prefixed(e.what()));
  } catch (const PeerFailure& e) {
    throw PeerFailure(set->prefixed(e.what()));
  }
  return set;
}

std::shared_ptr<comm::cuda::DeviceSet> makeGpuDevices(const Config& config) {
  // After an abort the device stops at once or not at all: the drain waits
  // as long as the abort itself may take (comm/nccl: min(timeout, 10 s)).
  const auto drainLimit =
      std::min<std::chrono::milliseconds>(config.timeout, std::chrono::seconds(10));
  if (config.deviceRuntime) {
    return std::make_shared<comm::cuda::DeviceSet>(config.deviceRuntime, drainLimit);
  }
  if (KOLO_WITH_CUDA) return std::make_shared<comm::cuda::DeviceSet>(nullptr, drainLimit);
  return nullptr;
}

}  // namespace kolo
