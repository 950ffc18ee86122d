// In-process multi-rank harness: N ranks as threads of this process, each
// with its own Engine over one shared in-memory store. Any rank's failure is
// re-thrown on the test thread, naming the rank; a run that outlives its
// time limit fails instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kolo/config.h"
#include "kolo/engine.h"
#include "kolo/store.h"

namespace kolo::test {

// Config for tests: short timeouts so failures surface in seconds.
Config testConfig();

// Rank `rank` of `size` ranks, all on one host.
Identity localIdentity(int rank, int size);

// A meeting point for the n rank threads of one test, outside any engine:
// where a test must know that every rank finished one phase before any
// starts the next (an engine's barrier would itself negotiate). arrive()
// returns once all n arrived, or throws after limit, naming how many did.
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  void arrive(std::chrono::seconds limit = std::chrono::seconds(60));

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int arrived_ = 0;
  int generation_ = 0;
};

// Runs fn(rank) on n threads and waits for all of them. Re-throws the first
// failure as std::runtime_error("rank R: what"). If the threads do not all
// finish within limit, prints which ranks are stuck and aborts the process
// (a hung test must fail, and threads cannot be cancelled).
void runRanks(int n, const std::function<void(int rank)>& fn,
              std::chrono::seconds limit = std::chrono::seconds(90));

// Builds n engines over one HashStore (in parallel, as rendezvous needs) and
// runs fn(rank, engine) on each rank's thread. Engines are shut down after fn
// returns on every rank. If fn throws on a rank, that rank's engine is
// aborted with the message so the other ranks fail instead of waiting.
void spawn(int n, const std::function<void(int rank, Engine& engine)>& fn,
           const Config& config = testConfig(),
           std::chrono::seconds limit = std::chrono::seconds(90));

// spawn() with static process sets given to every engine's constructor.
void spawnWithSets(int n, const std::vector<std::vector<int>>& processSets,
                   const std::function<void(int rank, Engine& engine)>& fn,
                   const Config& config = testConfig(),
                   std::chrono::seconds limit = std::chrono::seconds(90));

}  // namespace kolo::test
