// Authentication and hostile input: wrong secrets, servers that cannot prove
// the secret, garbage, oversize and malformed frames. Each case checks that
// only the offending connection is dropped and the server keeps serving.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <future>
#include <system_error>
#include <thread>

#include "kolo/error.h"
#include "kolo/tcp_store.h"
#include "rendezvous/auth.h"
#include "rendezvous/protocol.h"
#include "rendezvous/socket.h"
#include "rendezvous_test_util.h"

namespace kolo::test {
namespace {

namespace rdv = kolo::rendezvous;
using std::chrono::milliseconds;

constexpr char kSecret[] = "the-real-secret-91c2";
constexpr char kWrongSecret[] = "a-wrong-secret-55d0";

rdv::Fd rawConnect(uint16_t port) {
  std::string error;
  rdv::Fd fd = rdv::connectTo("127.0.0.1", port, rdv::deadlineAfter(milliseconds(2000)), &error);
  if (!fd.valid()) throw std::runtime_error("raw connect failed: " + error);
  return fd;
}

rdv::Fd authenticatedConnect(uint16_t port, const std::string& secret) {
  rdv::Fd fd = rawConnect(port);
  rdv::AuthResult auth = rdv::authenticateServer(fd.get(), secret);
  if (auth.kind != rdv::AuthResult::kOk) throw std::runtime_error("auth: " + auth.reason);
  return fd;
}

// True when the server closes fd within limit (EOF or reset).
bool closedByServer(int fd, milliseconds limit = milliseconds(3000)) {
  auto deadline = rdv::deadlineAfter(limit);
  char buffer[512];
  for (;;) {
    rdv::IoResult io = rdv::recvAll(fd, buffer, 1, deadline);
    if (io == rdv::IoResult::kClosed || io == rdv::IoResult::kError) return true;
    if (io == rdv::IoResult::kTimeout) return false;
    // Discard the handshake bytes the server sent first.
  }
}

// The server must still serve a well-behaved client, including one that
// was already blocked in a GET while the bad input arrived.
void expectServerHealthy(TcpStoreServer& server, std::shared_ptr<Store> store,
                         std::future<std::string>& blockedGet, const std::string& key) {
  auto fresh = makeTcpStore("127.0.0.1", server.port(), kSecret);
  fresh->set(key, bytesOf("still-serving"));
  EXPECT_EQ(textOf(store->get(key, milliseconds(2000))), "still-serving");
  ASSERT_EQ(blockedGet.wait_for(milliseconds(3000)), std::future_status::ready);
  EXPECT_EQ(blockedGet.get(), "still-serving");
}

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = makeTcpStore("127.0.0.1", server_.port(), kSecret);
    auto waiter = makeTcpStore("127.0.0.1", server_.port(), kSecret);
    blockedGet_ = std::async(std::launch::async, [waiter] {
      return textOf(waiter->get("after-attack", milliseconds(10000)));
    });
  }
  void TearDown() override {
    if (blockedGet_.valid()) store_->set("after-attack", bytesOf("still-serving"));
  }

  void expectDroppedAndCounted(int fd) {
    EXPECT_TRUE(closedByServer(fd)) << "the server kept a bad connection open";
    EXPECT_TRUE(eventually([&] { return server_.rejectedConnections() == 1; }))
        << "rejectedConnections() = " << server_.rejectedConnections();
    expectServerHealthy(server_, store_, blockedGet_, "after-attack");
  }

  TcpStoreServer server_{"127.0.0.1", 0, kSecret};
  std::shared_ptr<Store> store_;
  std::future<std::string> blockedGet_;
};

TEST_F(HostileInput, WrongSecretIsRefusedLoggedAndCounted) {
  ::testing::internal::CaptureStderr();
  TcpStoreOptions options;
  options.connectTimeout = milliseconds(2000);
  try {
    makeTcpStore("127.0.0.1", server_.port(), kWrongSecret, options);
    ADD_FAILURE() << "a client with the wrong secret was accepted";
  } catch (const PeerFailure& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("refused our secret"), std::string::npos) << message;
    EXPECT_NE(message.find("127.0.0.1:" + std::to_string(server_.port())), std::string::npos);
    EXPECT_EQ(message.find(kWrongSecret), std::string::npos) << "secret in the message";
  }
  EXPECT_TRUE(eventually([&] { return server_.rejectedConnections() == 1; }));
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("refused connection from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("authentication failed"), std::string::npos) << log;
  EXPECT_EQ(log.find(kSecret), std::string::npos) << "the secret was logged";
  EXPECT_EQ(log.find(kWrongSecret), std::string::npos) << "the secret was logged";
  expectServerHealthy(server_, store_, blockedGet_, "after-attack");
}

TEST_F(HostileInput, GarbageBeforeAuthenticationIsDropped) {
  rdv::Fd fd = rawConnect(server_.port());
  std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(rdv::sendAll(fd.get(), garbage.data(), garbage.size(), rdv::kNoDeadline),
            rdv::IoResult::kOk);
  expectDroppedAndCounted(fd.get());
}

TEST_F(HostileInput, OversizeFrameIsDropped) {
  rdv::Fd fd = authenticatedConnect(server_.port(), kSecret);
  const unsigned char header[4] = {0x06, 0x40, 0x00, 0x00};  // 100 MiB
  ASSERT_EQ(rdv::sendAll(fd.get(), header, sizeof(header), rdv::kNoDeadline),
            rdv::IoResult::kOk);
  expectDroppedAndCounted(fd.get());
}

TEST_F(HostileInput, UnknownCommandIsDropped) {
  rdv::Fd fd = authenticatedConnect(server_.port(), kSecret);
  rdv::Writer request;
  request.u8(99).bytes(std::string("key"));
  ASSERT_EQ(rdv::writeFrame(fd.get(), request.data(), rdv::kNoDeadline), rdv::IoResult::kOk);
  expectDroppedAndCounted(fd.get());
}

TEST_F(HostileInput, TruncatedRequestIsDropped) {
  rdv::Fd fd = authenticatedConnect(server_.port(), kSecret);
  rdv::Writer request;
  request.u8(static_cast<uint8_t>(rdv::Command::kSet)).u32(1000).raw("abc", 3);
  ASSERT_EQ(rdv::writeFrame(fd.get(), request.data(), rdv::kNoDeadline), rdv::IoResult::kOk);
  expectDroppedAndCounted(fd.get());
}

TEST_F(HostileInput, SilentConnectionDoesNotBlockOthersOrShutdown) {
  rdv::Fd silent = rawConnect(server_.port());  // never answers the challenge
  expectServerHealthy(server_, store_, blockedGet_, "after-attack");
  EXPECT_EQ(server_.rejectedConnections(), 0u);
}

// A fake server that greets like a kolo store but cannot prove the secret.
TEST(TcpStoreAuth, ClientRejectsAServerThatCannotProveTheSecret) {
  rdv::Fd listener = rdv::listenOn("127.0.0.1", 0);
  uint16_t port = rdv::localPort(listener.get());
  std::thread impostor([&] {
    pollfd pfd{listener.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 5000) != 1) return;
    rdv::Fd fd = rdv::acceptOne(listener.get(), nullptr);
    auto deadline = rdv::deadlineAfter(milliseconds(5000));
    rdv::Writer hello;
    hello.raw("kolo-store-v1", 13).raw(std::string(32, 'n').data(), 32);
    rdv::writeFrame(fd.get(), hello.data(), deadline);
    std::vector<char> answer;
    rdv::readFrame(fd.get(), &answer, 256, deadline);
    rdv::Writer verdict;
    verdict.u8(0).raw(std::string(32, '\0').data(), 32);  // "accepted", bogus proof
    rdv::writeFrame(fd.get(), verdict.data(), deadline);
    char byte;
    rdv::recvAll(fd.get(), &byte, 1, deadline);  // until the client hangs up
  });
  TcpStoreOptions options;
  options.connectTimeout = milliseconds(3000);
  try {
    makeTcpStore("127.0.0.1", port, kSecret, options);
    ADD_FAILURE() << "trusted a server that does not know the secret";
  } catch (const PeerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("could not prove"), std::string::npos) << e.what();
  }
  impostor.join();
}

TEST(TcpStoreAuth, ClientRejectsSomethingThatIsNotAKoloStore) {
  rdv::Fd listener = rdv::listenOn("127.0.0.1", 0);
  uint16_t port = rdv::localPort(listener.get());
  std::thread other([&] {
    pollfd pfd{listener.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 5000) != 1) return;
    rdv::Fd fd = rdv::acceptOne(listener.get(), nullptr);
    std::string banner = "SSH-2.0-OpenSSH_9.2\r\n";
    rdv::sendAll(fd.get(), banner.data(), banner.size(), rdv::deadlineAfter(milliseconds(2000)));
    char byte;
    rdv::recvAll(fd.get(), &byte, 1, rdv::deadlineAfter(milliseconds(5000)));
  });
  TcpStoreOptions options;
  options.connectTimeout = milliseconds(3000);
  Stopwatch watch;
  EXPECT_THROW(makeTcpStore("127.0.0.1", port, kSecret, options), PeerFailure);
  EXPECT_LT(watch.elapsed().count(), 3000);
  other.join();
}

TEST(TcpStoreAuth, SilentHandshakesDoNotDelayDestruction) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  std::vector<rdv::Fd> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(rawConnect(server->port()));
  std::this_thread::sleep_for(milliseconds(100));  // threads are now in the handshake
  Stopwatch watch;
  server.reset();
  EXPECT_LT(watch.elapsed().count(), 1500);
  for (auto& fd : silent) EXPECT_TRUE(closedByServer(fd.get()));
}

}  // namespace
}  // namespace kolo::test
