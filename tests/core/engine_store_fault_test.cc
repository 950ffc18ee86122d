// The rendezvous store failing while the ranks meet at init: a store
// server that goes away, and one restarted on the same port (it lost every
// key). Ranks are threads, each with its own TCP store client and engine,
// as processes would be; one rank never comes, so the others are waiting
// in init when the store fails. Every rank must fail with an error naming
// what went wrong, within its timeout; none may hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/harness.h"
#include "kolo/engine.h"
#include "kolo/tcp_store.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kSize = 4;
constexpr int kStarted = 3;  // rank 3 never starts
constexpr auto kTimeout = 5s;
constexpr char kSecret[] = "store-fault-test";

struct Outcome {
  std::string error;  // empty: init succeeded
  Clock::duration took{};
};

// Starts ranks 0..kStarted-1 against the server at port; returns once each
// arrived (its arrival key is in the store), with the threads running.
std::vector<std::thread> startRanks(uint16_t port, std::vector<Outcome>& out) {
  std::vector<std::thread> ranks;
  for (int r = 0; r < kStarted; ++r) {
    ranks.emplace_back([&out, port, r] {
      Config config = test::testConfig();
      config.timeout = kTimeout;
      const auto start = Clock::now();
      try {
        TcpStoreOptions options;
        options.connectTimeout = kTimeout;
        auto store = makeTcpStore("127.0.0.1", port, kSecret, options);
        Engine engine(config, test::localIdentity(r, kSize), store);
        out[r].error.clear();
      } catch (const std::exception& e) {
        out[r].error = e.what();
      }
      out[r].took = Clock::now() - start;
    });
  }
  auto probe = makeTcpStore("127.0.0.1", port, kSecret);
  const auto deadline = Clock::now() + 30s;
  for (int r = 0; r < kStarted; ++r) {
    while (!probe->check("kolo/arrived/" + std::to_string(r)) && Clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
  }
  return ranks;
}

// Each rank failed, naming `what`, within its timeout plus a margin for a
// loaded machine.
void expectNamedFailures(const std::vector<Outcome>& out, const std::string& what) {
  for (int r = 0; r < kStarted; ++r) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(out[r].took).count();
    ASSERT_FALSE(out[r].error.empty()) << "rank " << r << ": init succeeded without rank 3";
    EXPECT_NE(out[r].error.find(what), std::string::npos)
        << "rank " << r << " (after " << ms << " ms): " << out[r].error;
    EXPECT_LT(out[r].took, kTimeout + 10s) << "rank " << r << " failed after " << ms << " ms";
    std::printf("rank %d failed after %lld ms: %s\n", r, static_cast<long long>(ms),
                out[r].error.c_str());
  }
}

TEST(StoreFaults, AServerGoneMidStartupFailsEveryRankNamingTheStore) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  const uint16_t port = server->port();
  std::vector<Outcome> out(kStarted);
  std::vector<std::thread> ranks = startRanks(port, out);
  server.reset();  // the store goes away while they wait for rank 3
  for (auto& t : ranks) t.join();
  expectNamedFailures(out, "127.0.0.1:" + std::to_string(port));
}

TEST(StoreFaults, ALateRankMeetingARestartedServerFailsInTime) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  const uint16_t port = server->port();
  std::vector<Outcome> out(kStarted);
  std::vector<std::thread> ranks = startRanks(port, out);
  server.reset();
  for (auto& t : ranks) t.join();
  expectNamedFailures(out, "127.0.0.1:" + std::to_string(port));
  // The same port again, with none of the keys the first ranks wrote; the
  // late rank 3 finds no peer there and must not wait past its timeout.
  std::unique_ptr<TcpStoreServer> restarted;
  const auto deadline = Clock::now() + 10s;
  while (!restarted && Clock::now() < deadline) {
    try {
      restarted = std::make_unique<TcpStoreServer>("127.0.0.1", port, kSecret);
    } catch (const std::exception&) {
      std::this_thread::sleep_for(10ms);  // the old listener's port not yet free
    }
  }
  ASSERT_NE(restarted, nullptr) << "could not listen on port " << port << " again";
  Config config = test::testConfig();
  config.timeout = kTimeout;
  const auto start = Clock::now();
  std::string error;
  try {
    Engine late(config, test::localIdentity(3, kSize), makeTcpStore("127.0.0.1", port, kSecret));
  } catch (const std::exception& e) {
    error = e.what();
  }
  const auto took = Clock::now() - start;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
  std::printf("rank 3 failed after %lld ms: %s\n", static_cast<long long>(ms), error.c_str());
  ASSERT_FALSE(error.empty()) << "rank 3's init succeeded alone";
  EXPECT_LT(took, kTimeout + 10s) << "rank 3 failed after " << ms << " ms: " << error;
  EXPECT_NE(error.find("ranks 0, 1, 2 of 4 have not arrived"), std::string::npos) << error;
}

}  // namespace
}  // namespace kolo
