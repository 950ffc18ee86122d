#include "harness/harness.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kolo::test {

Config testConfig() {
  Config config;
  config.timeout = std::chrono::seconds(20);
  config.cycleTime = std::chrono::microseconds(500);
  config.stallCheckTime = std::chrono::milliseconds(0);
  config.logLevel = LogLevel::kError;
  return config;
}

Identity localIdentity(int rank, int size) {
  Identity id;
  id.rank = rank;
  id.size = size;
  id.localRank = rank;
  id.localSize = size;
  return id;
}

void ThreadBarrier::arrive(std::chrono::seconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  const int generation = generation_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  if (!cv_.wait_for(lock, limit, [&] { return generation_ != generation; })) {
    throw std::runtime_error("ThreadBarrier: " + std::to_string(arrived_) + " of " +
                             std::to_string(n_) + " ranks arrived within " +
                             std::to_string(limit.count()) + "s");
  }
}

void runRanks(int n, const std::function<void(int rank)>& fn,
              std::chrono::seconds limit) {
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<char> done(n, 0);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      done[r] = 1;
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, limit, [&] { return finished == n; })) {
      std::string stuck;
      for (int r = 0; r < n; ++r) {
        if (!done[r]) stuck += " " + std::to_string(r);
      }
      std::fprintf(stderr, "harness: ranks%s still running after %llds; aborting\n",
                   stuck.c_str(), static_cast<long long>(limit.count()));
      std::fflush(stderr);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      throw std::runtime_error("rank " + std::to_string(r) + ": " + e.what());
    }
  }
}

void spawn(int n, const std::function<void(int rank, Engine& engine)>& fn,
           const Config& config, std::chrono::seconds limit) {
  spawnWithSets(n, {}, fn, config, limit);
}

void spawnWithSets(int n, const std::vector<std::vector<int>>& processSets,
                   const std::function<void(int rank, Engine& engine)>& fn,
                   const Config& config, std::chrono::seconds limit) {
  auto store = makeHashStore();
  runRanks(
      n,
      [&](int rank) {
        Engine engine(config, localIdentity(rank, n), store, processSets);
        try {
          fn(rank, engine);
        } catch (const std::exception& e) {
          engine.abort(e.what());
          throw;
        }
        engine.shutdown();
      },
      limit);
}

}  // namespace kolo::test
