// What a backend factory gets to build its control channel or collectives.
#pragma once

#include <functional>
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
  // A broadcast over the set's control plane (bytes from root to every
  // rank), for backends that bootstrap out of band (NCCL's unique id):
  // under mpirun without a rendezvous address the store is private to each
  // process. Callable on the engine's loop thread at a point every member
  // reaches in the same order (the set's first response of that plane).
  // Empty: the backend uses store.
  std::function<void(std::vector<char>& bytes, int root)> broadcast = {};
};

}  // namespace kolo::comm
