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

TEST(TcpMesh, MissingRankIsNamedInTheTimeout) {
  Config config = commConfig();
  config.timeout = std::chrono::milliseconds(400);
  std::vector<std::string> messages(2);
  // Ranks 0 and 1 of 3; rank 2 never comes.
  auto store = makeHashStore();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      Identity id = localIdentity(rank, 3);
      comm::BackendArgs args{config, id, store, "127.0.0.1"};
      try {
        comm::tcp::createControlChannel(args);
      } catch (const Timeout& e) {
        messages[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(messages[rank].find("rank 2"), std::string::npos) << messages[rank];
  }
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
  EXPECT_NE(message.find("rank 1 sent 100 bytes where 8 were expected"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace kolo::test
