// kolo's TCP mesh (comm/tcp): what the conformance suites do not cover —
// who may join a mesh, and how a missing or out-of-step peer is reported.
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/conformance.h"
#include "comm/tcp/control_channel.h"
#include "comm/tcp/mesh.h"
#include "comm/tcp/topology.h"
#include "harness/harness.h"
#include "kolo/error.h"
#include "kolo/store.h"
#include "rendezvous/socket.h"

namespace kolo::test {
namespace {

using rendezvous::Fd;

// Connects to rank 0's published control address (as any process could).
Fd connectToRankZero(Store& store) {
  auto bytes = store.get("control/addr/0", std::chrono::seconds(10));
  std::string text(bytes.begin(), bytes.end());
  auto colon = text.rfind(':');
  std::string error;
  Fd fd = rendezvous::connectTo(text.substr(0, colon),
                                static_cast<uint16_t>(std::stoi(text.substr(colon + 1))),
                                rendezvous::deadlineAfter(std::chrono::seconds(5)), &error);
  EXPECT_TRUE(fd.valid()) << error;
  return fd;
}

TEST(TcpMesh, StrangersAreDroppedAndTheJobStillForms) {
  runWithArgs(2, [](int rank, const comm::BackendArgs& args) {
    if (rank == 1) {
      // Garbage, then a well-formed hello carrying a wrong token, then the
      // real rank 1. Rank 0 must drop the first two and accept the third.
      Fd garbage = connectToRankZero(*args.store);
      const char junk[] = "GET / HTTP/1.0\r\n\r\n and then some more bytes to fill a hello";
      rendezvous::sendAll(garbage.get(), junk, sizeof(junk),
                          rendezvous::deadlineAfter(std::chrono::seconds(1)));
      Fd forged = connectToRankZero(*args.store);
      std::vector<char> hello(36, 0);
      const uint32_t fields[5] = {0x4b434c48, 1, 1, 0, 2};  // magic, version, from, to, size
      std::memcpy(hello.data(), fields, sizeof(fields));     // token: all zeros
      rendezvous::sendAll(forged.get(), hello.data(), hello.size(),
                          rendezvous::deadlineAfter(std::chrono::seconds(1)));
      // Both get closed without an answer.
      char byte;
      EXPECT_NE(rendezvous::recvAll(forged.get(), &byte, 1,
                                    rendezvous::deadlineAfter(std::chrono::seconds(10))),
                rendezvous::IoResult::kOk);
    }
    auto control = comm::tcp::createControlChannel(args);
    std::vector<uint64_t> bits{rank == 0 ? 0b0110u : 0b0011u};
    control->allreduceAnd(bits);
    EXPECT_EQ(bits[0], 0b0010u);
  });
}

// A rank connects at setup to the peers its algorithms use every step:
// one whose neighbour never comes names it; one whose neighbours are all
// there gets its error from the first step, when a neighbour gave up.
TEST(TcpMesh, MissingRankIsNamedInTheTimeout) {
  Config config = commConfig();
  config.timeout = std::chrono::milliseconds(400);
  std::vector<std::string> messages(2);
  // Ranks 0 and 1 of 3; rank 2 never comes. Rank 2 folds into rank 0 in
  // recursive doubling, so only rank 0 waits for it at setup.
  auto store = makeHashStore();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      Identity id = localIdentity(rank, 3);
      comm::BackendArgs args{config, id, store, "127.0.0.1"};
      try {
        auto control = comm::tcp::createControlChannel(args);
        control->barrier();
        messages[rank] = "no error";
      } catch (const Error& e) {
        messages[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(messages[0].find("rank 2 did not connect"), std::string::npos) << messages[0];
  EXPECT_NE(messages[1].find("rank 0"), std::string::npos) << messages[1];
}

// Setup connects O(log n) peers, not n - 1, and the others on first use.
TEST(TcpMesh, ConnectsOnlyThePeersItsAlgorithmsUse) {
  const int n = 16;
  std::vector<int> atSetup(n), afterBroadcast(n);
  runWithArgs(n, [&](int rank, const comm::BackendArgs& args) {
    const auto neighbours = comm::tcp::recursiveDoublingPeers(rank, n);
    auto mesh = comm::tcp::Mesh::connect(args, "test connect", neighbours);
    atSetup[rank] = mesh->connectedPeers();
    const comm::tcp::Mesh* raw = mesh.get();
    comm::tcp::ControlChannel control(std::move(mesh));
    std::vector<uint64_t> bits{uint64_t(1) << rank};
    control.allreduceOr(bits);
    EXPECT_EQ(bits[0], (uint64_t(1) << n) - 1);
    auto all = control.gatherv(std::vector<char>(rank + 1, char('a' + rank)), 0);
    if (rank == 0) {
      for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], std::vector<char>(r + 1, char('a' + r)));
    }
    std::vector<char> word = rank == 5 ? std::vector<char>{'h', 'i'} : std::vector<char>{};
    control.broadcast(word, 5);  // a tree over other edges: connected now
    EXPECT_EQ(word, (std::vector<char>{'h', 'i'}));
    afterBroadcast[rank] = raw->connectedPeers();
  });
  int before = 0;
  int after = 0;
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_EQ(atSetup[rank],
              static_cast<int>(comm::tcp::recursiveDoublingPeers(rank, n).size()))
        << "rank " << rank;
    EXPECT_LE(atSetup[rank], 8) << "rank " << rank;  // 2 log2 16
    EXPECT_LE(afterBroadcast[rank], 12) << "rank " << rank;
    before += atSetup[rank];
    after += afterBroadcast[rank];
  }
  EXPECT_GT(after, before);  // the broadcast from rank 5 needed new edges
}

TEST(TcpMesh, RanksOutOfStepAreReportedNotMisread) {
  std::string message;
  runWithArgs(2, [&](int rank, const comm::BackendArgs& args) {
    auto control = comm::tcp::createControlChannel(args);
    if (rank == 1) {
      control->gatherv(std::vector<char>(100, 'x'), 0);  // rank 0 is not gathering
      EXPECT_THROW(control->barrier(), Error);  // out of step too, or rank 0 gave up
      return;
    }
    std::vector<uint64_t> bits{1};
    try {
      control->allreduceAnd(bits);
    } catch (const Internal& e) {
      message = e.what();
    }
  });
  // Rank 1's gather record (its 100 bytes behind a rank and a length).
  EXPECT_NE(message.find("rank 1 sent 112 bytes where 8 were expected"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace kolo::test
