// What a backend factory gets to build its control channel or collectives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kolo/config.h"
#include "kolo/store.h"

namespace kolo::comm {

struct BackendArgs {
  const Config& config;
  const Identity& identity;
  // Private to the backend being built (already prefixed by the engine).
  std::shared_ptr<Store> store;
  // Address peers should use to reach this rank ("127.0.0.1" when every rank
  // is local); ignored when config.iface names an interface.
  std::string localAddress;
  // A process set's channels: the job rank of each rank of identity (whose
  // rank and size are within the set). Empty: identity is the whole job.
  // Backends that address processes by their job-wide name (MPI) need it.
  std::vector<int> worldRanks = {};
};

}  // namespace kolo::comm
