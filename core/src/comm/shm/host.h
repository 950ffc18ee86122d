// Which ranks of a group share a host, i.e. can map the same shared memory
// and see each other's processes.
//
// A host is identified by a key built from the kernel's boot id, the
// network and PID namespaces and the /dev/shm file system of this process:
// two ranks with equal keys run on one kernel, share /dev/shm and see each
// other's PIDs. Network namespaces count as hosts of their own, as the
// launcher sees them (kolo's two-"host" tests run hosts as namespaces of one
// machine).
//
// The layout is learned inside the group, through its store, so it holds for
// any group (a process set is not described by the job's local rank/size).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/backend_args.h"

namespace kolo::comm::shm {

// Longest host key accepted from the store.
constexpr size_t kMaxHostKeyBytes = 512;

struct HostLayout {
  std::vector<int> hostOf;              // by rank: its host, numbered by lowest rank
  std::vector<std::vector<int>> hosts;  // by host: its ranks, ascending

  int size() const { return static_cast<int>(hostOf.size()); }
  int hostCount() const { return static_cast<int>(hosts.size()); }
  // Every host has the same number of ranks.
  bool uniform() const;
  // Position of rank among the ranks of its host, and their count.
  int localRank(int rank) const;
  int localSize(int rank) const { return static_cast<int>(hosts[hostOf[rank]].size()); }
  // "2 hosts of 2 ranks", "hosts of 2, 2 and 1 ranks": for log lines.
  std::string describe() const;
};

// This process's host key (see above).
std::string hostKey();

// Every rank of args.identity publishes its key under "host/<rank>" in
// args.store (or Config::hostKeyOverride's, when set) and reads everyone's.
// Collective; throws Timeout when a rank does not show up within the
// timeout and InvalidArgument when a key read from the store is malformed.
HostLayout exchangeLayout(const BackendArgs& args);

// The layout of a group from its ranks' keys (by rank).
HostLayout layoutOf(const std::vector<std::string>& keys);

}  // namespace kolo::comm::shm
