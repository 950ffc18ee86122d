// The worker's side of the elastic protocol (kolo/elastic_world.h): what
// kolo::init() does in a process started by kolorun's elastic driver.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kolo/config.h"
#include "kolo/elastic_world.h"
#include "kolo/engine.h"
#include "kolo/store.h"

namespace kolo::elastic::detail {

// One per process, owned by the process-level state behind kolo::init()
// (engine/api.cc); it lives across shutdown()/init(), remembering the last
// world. startEngine() runs on the thread calling init(); the other methods
// may be called from any thread.
class WorkerClient {
 public:
  // Connects to the job's store (bounded by config.timeout).
  WorkerClient(const LaunchInfo& info, const Config& config);

  // Leaves the world of the previous engine (if any), publishing why, then
  // waits for the next world that lists this worker and returns its engine.
  // A world whose rendezvous fails (a member died while it formed) is left
  // the same way and the next one awaited. Throws ShutdownError when the
  // driver ends the job (elastic/finished) and PeerFailure when the store is
  // gone (kolorun died). This is the one place where an elastic worker
  // (re)builds its engine: the static process sets given to the first
  // init() are rebuilt in every world (ids 1, 2, ... again); dynamic sets
  // end with the world. A set naming a rank the new world lacks is an
  // InvalidArgument naming the world.
  std::unique_ptr<Engine> startEngine(const Config& config,
                                      const std::vector<std::vector<int>>& processSets);

  int64_t workerId() const { return worker_; }
  // The world of the engine last started (version 0 before the first).
  World world() const;
  // The driver's host-update notice counter now (one store read).
  int64_t readNotice();
  // Why the next startEngine() leaves the current world; published with it.
  void setLeaveReason(const std::string& reason);

 private:
  // Publishes reason and "ready after world `left`".
  void announceReady(int64_t left, const std::string& reason);
  void throwIfFinished();

  std::shared_ptr<Store> store_;
  int64_t worker_;
  mutable std::mutex mu_;  // guards world_ and reason_
  World world_;
  std::string reason_;
};

// The process's client: null unless this process is an elastic worker that
// called kolo::init() at least once (defined in engine/api.cc).
WorkerClient* processClient();

}  // namespace kolo::elastic::detail
