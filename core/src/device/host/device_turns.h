// DeviceTurns: the host runtime's model of what a GPU does with the
// kernels of several communicators (NCCL's rule): a device runs one
// collective at a time, whichever stream it came from, and a collective
// holds its device until every member arrived and finished. Ranks that
// issue two cliques' collectives in different orders therefore wait on
// each other for good, as NCCL hangs; DeviceTurns finds that cycle when it
// closes and fails it at once, naming the devices and cliques involved.
//
// Threading: any thread. Lock order: DeviceTurns before any Clique.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kolo/error.h"

namespace kolo::device::host {

class Clique;

class DeviceTurns {
 public:
  explicit DeviceTurns(int devices) : holders_(static_cast<size_t>(devices)) {}

  // Member `rank` of clique (named id in messages) takes device for one
  // collective, waiting while another clique's collective holds it. Fails
  // (the device not taken) when waiting would never end, because the
  // cliques wait for each other around a cycle of devices (every clique of
  // the cycle is aborted with the same message), or at deadline.
  Status take(int device, Clique* clique, uint64_t id, int rank,
              std::chrono::steady_clock::time_point deadline);
  // Member rank of the clique gives device back after take() succeeded.
  void give(int device, int rank);
  // The id of the clique whose collective holds device now; 0: none (tests).
  uint64_t holder(int device) const;

 private:
  // The clique whose collective holds a device, and its members there
  // (several when ranks share a device).
  struct Holder {
    Clique* clique = nullptr;
    uint64_t id = 0;
    std::vector<int> ranks;
  };
  struct Request {
    int device;
    Clique* clique;
    uint64_t id;
    int rank;
  };
  // The cycle that request closes, or none (empty cliques). mu_ held.
  struct Cycle {
    std::string path;              // the devices and cliques, described
    std::vector<Clique*> cliques;  // every clique on it
  };
  Cycle cycleLocked(const Request& request) const;

  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::vector<Holder> holders_;   // by device
  std::vector<Request> waiting_;  // requests waiting for their device
};

}  // namespace kolo::device::host
