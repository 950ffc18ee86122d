// Process sets inside the engine: the registry every thread reads
// (ProcessSetTable) and the state of one set on the loop thread
// (ProcessSetState). See kolo/engine.h for what a process set is.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/cuda/device_set.h"
#include "execution/pending.h"
#include "execution/executor.h"
#include "kolo/engine.h"
#include "negotiation/controller.h"
#include "negotiation/response_cache.h"
#include "negotiation/stall_inspector.h"

namespace kolo {

// "process set 2 (ranks 0,2)".
std::string processSetLabel(int id, const std::vector<int>& ranks);
// A local set's: "process set 'key' (ranks 0,2)" (its id differs between ranks).
std::string localProcessSetLabel(const std::string& key, const std::vector<int>& ranks);

// The numbers messages of set id call its ranks (job ranks, ascending) by:
// Config::rankNames for set 0 when given, else ranks themselves.
std::vector<int> messageRanks(int id, const std::vector<int>& ranks, const Config& config);

// ranks sorted, or InvalidArgument naming what is wrong (empty, out of
// [0, size), duplicated). `what` starts the message ("add_process_set").
std::vector<int> checkedProcessSetRanks(std::vector<int> ranks, int size, const char* what);

// The process sets that exist, by id, and which of them this rank has
// joined. Any thread; the loop adds and removes entries at the point of the
// global response order where every rank does.
class ProcessSetTable {
 public:
  explicit ProcessSetTable(int rank) : rank_(rank) {}

  // key: a local set's (Engine::addLocalProcessSet); empty for the others.
  void add(int id, std::vector<int> ranks, std::string key = "");
  void remove(int id);
  // Removes a local set that a stall ended; memberOf(id) then throws why
  // (its Timeout), not that the set does not exist.
  void end(int id, Status why);
  // For an op named `what` of a set that end() removed: the stall's status,
  // naming the op; nullopt for any other set.
  std::optional<Status> endedBy(int id, const std::string& what) const;

  // InvalidArgument for unknown ids.
  ProcessSetInfo info(int id) const;
  std::vector<ProcessSetInfo> all() const;
  // The id of the set every rank added with exactly these (sorted) ranks,
  // or -1. Local sets do not count: the other ranks do not know them.
  int find(const std::vector<int>& ranks) const;
  // The id of the local set with this key, or -1.
  int findLocal(const std::string& key) const;
  // What an operation named `what` on set id runs in: InvalidArgument when
  // the set does not exist or this rank is not a member.
  ProcessSetInfo memberOf(int id, const std::string& what) const;

  // join() called on the set and not completed yet.
  bool joined(int id) const;
  void setJoined(int id, bool joined);
  // joined() of any set.
  bool anyJoined() const;

 private:
  struct Entry {
    std::vector<int> ranks;
    bool joined = false;
    std::string key;  // local sets only
  };
  ProcessSetInfo infoLocked(int id, const Entry& e) const;
  std::optional<Status> endedLocked(int id, const std::string& what) const;

  const int rank_;
  mutable std::mutex mu_;
  std::map<int, Entry> sets_;
  std::map<int, Status> ended_;  // end(): why each ended set ended
};

using PendingMap = std::unordered_map<std::string, PendingOp>;

// One process set as this rank runs it (members only): its negotiation
// (controller over its own control channel, response cache, stall
// inspector, join state), its data plane (executor) and its pending
// operations. Built by connectProcessSet; loop thread only afterwards.
struct ProcessSetState {
  // The engine's Config with the set's own limits (a local set's
  // ProcessSetLimits): its controller, planes and stall inspector read this.
  Config config;
  int id = 0;
  std::vector<int> ranks;  // job ranks, ascending
  Identity identity;       // this rank's place in the set
  std::string key;         // a local set's key; empty for the others
  std::string label;       // processSetLabel() (local: localProcessSetLabel()); empty for set 0
  // Where the set's cycles run among the others (ascending): the order in
  // which this rank installed them, which every member shares because
  // every install happens at one point of set 0's order.
  int64_t order = 0;
  // A local set that a stall ended on every member: removed after its cycle.
  bool ended = false;
  EngineStats stats;       // this set's counters (loop thread)
  ResponseCache cache;
  std::unique_ptr<Controller> controller;
  std::unique_ptr<Executor> executor;
  std::string dataPlane;           // what comm::createCpuDataPlane chose, and why
  bool dataPlaneFellBack = false;  // it fell back from what was asked or expected
  StallInspector stall;
  PendingMap pending;
  std::vector<PendingOp> fresh;      // drained, admitted at the set's next cycle
  std::vector<int> invalidBits;      // cache entries found stale since the last cycle
  std::vector<int> evictedThisCycle;
  std::vector<bool> joined;  // by set rank: joined since the set's last join completed

  ProcessSetState(int id, std::vector<int> ranks, Identity identity, Config config,
                  std::string key = "");

  // "op 'name'" errors of this set start with the label.
  std::string prefixed(const std::string& message) const {
    return label.empty() ? message : label + ": " + message;
  }
};

// What connecting a set needs from the engine.
struct ProcessSetContext {
  const Config& config;
  const Identity& job;
  std::shared_ptr<Store> store;  // the engine generation's store
  std::string localAddress;
  const std::vector<std::string>& hosts;  // by job rank (empty while set 0 connects)
  Tunables& tunables;
  // The engine's GPU devices (one comm stream per device), shared by every
  // set so that all sets' collectives run on it in the one global response
  // order; nullptr when the engine has no device runtime (makeGpuDevices).
  std::shared_ptr<comm::cuda::DeviceSet> gpuDevices = nullptr;
};

// The engine's GPU devices over config.deviceRuntime, or over CUDA in a
// build with it; nullptr when there is neither (CUDA tensors are refused at
// enqueue then). Nothing touches a device until the first CUDA response.
std::shared_ptr<comm::cuda::DeviceSet> makeGpuDevices(const Config& config);

// This rank's place in a set: rank and size within ranks; local and cross
// ranks among the members from the hosts of the job's ranks (hosts[r]:
// where rank r runs).
Identity processSetIdentity(const Identity& job, const std::vector<int>& ranks,
                            const std::vector<std::string>& hosts);

// Connects the control channel and data plane of set id among its members;
// every member calls this at the same point (set 0 and static sets in the
// Engine constructor, added sets when set 0's response adds them). Blocks
// until every member is connected (Timeout after config.timeout).
// limits: a local set's own (ProcessSetLimits); the others take ctx.config.
// A local set (key not empty) connects under its key instead of its id, on
// a caller's thread while the loop runs (Engine::addLocalProcessSet).
std::unique_ptr<ProcessSetState> connectProcessSet(const ProcessSetContext& ctx, int id,
                                                   std::vector<int> ranks,
                                                   const std::string& key = "");

}  // namespace kolo
