// The environment each worker starts with. Pure functions over name/value
// lists; the caller passes kolorun's own environment in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hosts.h"
#include "options.h"
#include "tuning_env.h"

namespace kolo::launcher {

struct RendezvousInfo {
  std::string addr;
  uint16_t port = 0;
  std::string secret;
  // Where rank 0 serves torch.distributed's store (env://): MASTER_ADDR and
  // MASTER_PORT; no port: torch's variables are not set.
  std::string torchAddr = {};
  uint16_t torchPort = 0;
};

// KOLO_RANK ... KOLO_SECRET_KEY for one rank.
EnvList identityEnv(const RankPlacement& rank, const RendezvousInfo& rendezvous);

// What torch.distributed's env:// reads, as torchrun sets it: RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
// MASTER_PORT (empty without rendezvous.torchPort).
EnvList torchEnv(const RankPlacement& rank, const RendezvousInfo& rendezvous);

// The variables a worker must get on top of what it inherits: torch's
// env:// variables, -x NAME=VALUE and -x NAME (taken from `inherited`), the
// tuning flags, then the identity. Later entries win (so -x MASTER_PORT=N
// replaces the port kolorun chose).
EnvList jobEnv(const Options& options, const std::vector<std::string>& inherited,
               const RankPlacement& rank, const RendezvousInfo& rendezvous);

// An elastic worker's variables (on top of what it inherits): -x, the
// tuning flags, KOLO_ELASTIC_WORKER (its id), KOLO_HOSTNAME and the store.
// No KOLO_RANK/KOLO_SIZE: rank and size come with each world.
EnvList elasticWorkerEnv(const Options& options, const std::vector<std::string>& inherited,
                         int64_t worker, const std::string& host,
                         const RendezvousInfo& rendezvous);

// A local worker: kolorun's environment with `overrides` replacing or adding
// variables. Returns "NAME=VALUE" strings.
std::vector<std::string> localWorkerEnv(const std::vector<std::string>& inherited,
                                        const EnvList& overrides);

// A remote worker: the host's own environment plus these (sent as exports):
// every KOLO_* and HOROVOD_* variable of kolorun's environment (kolo's
// settings and their Horovod aliases), then `overrides`.
EnvList remoteWorkerEnv(const std::vector<std::string>& inherited, const EnvList& overrides);

// The calling process's environment as "NAME=VALUE" strings.
std::vector<std::string> currentEnvironment();

}  // namespace kolo::launcher
