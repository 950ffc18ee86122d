// TcpStoreServer / makeTcpStore behaviour beyond the Store contract:
// connection setup, errors, shutdown and concurrency.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <system_error>
#include <thread>

#include "harness/ports.h"
#include "kolo/error.h"
#include "kolo/tcp_store.h"
#include "rendezvous_test_util.h"

namespace kolo::test {
namespace {

using std::chrono::milliseconds;

constexpr char kSecret[] = "job-secret-7f3a";

TEST(TcpStore, ClientStartedBeforeServerConnectsOnceItListens) {
  uint16_t port = freeListenPort();
  TcpStoreOptions options;
  options.connectTimeout = std::chrono::seconds(10);
  auto pending = std::async(std::launch::async,
                            [&] { return makeTcpStore("127.0.0.1", port, kSecret, options); });
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_EQ(pending.wait_for(milliseconds(0)), std::future_status::timeout)
      << "the client should still be retrying";
  TcpStoreServer server("127.0.0.1", port, kSecret);
  std::shared_ptr<Store> store = pending.get();
  store->set("k", bytesOf("v"));
  EXPECT_EQ(textOf(server.localStore()->get("k", milliseconds(1000))), "v");
}

TEST(TcpStore, UnreachableServerTimesOutWithAClearMessage) {
  uint16_t port = freeListenPort();
  TcpStoreOptions options;
  options.connectTimeout = milliseconds(300);
  Stopwatch watch;
  try {
    makeTcpStore("127.0.0.1", port, kSecret, options);
    FAIL() << "connected to a port nobody listens on";
  } catch (const Timeout& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("could not reach rendezvous store at 127.0.0.1:" +
                           std::to_string(port) + " after"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("refused"), std::string::npos) << message;
  }
  EXPECT_GE(watch.elapsed().count(), 250);
  EXPECT_LT(watch.elapsed().count(), 2000);
}

TEST(TcpStore, BindingAPortInUseNamesThePortAndAFix) {
  TcpStoreServer first("127.0.0.1", 0, kSecret);
  std::string port = std::to_string(first.port());
  try {
    TcpStoreServer second("127.0.0.1", first.port(), kSecret);
    FAIL() << "two servers bound port " << port;
  } catch (const InvalidArgument& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("127.0.0.1:" + port), std::string::npos) << message;
    EXPECT_NE(message.find("already in use"), std::string::npos) << message;
    EXPECT_NE(message.find("choose another port"), std::string::npos) << message;
  }
  // The first server is unaffected.
  auto store = makeTcpStore("127.0.0.1", first.port(), kSecret);
  EXPECT_EQ(store->add("n", 1), 1);
}

TEST(TcpStore, BindingAForeignAddressIsAClearError) {
  // 203.0.113.0/24 is reserved for documentation; no host owns it.
  try {
    TcpStoreServer server("203.0.113.7", 0, kSecret);
    FAIL() << "bound an address this machine does not have";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("203.0.113.7"), std::string::npos) << e.what();
  }
}

TEST(TcpStore, ListensOnEveryInterfaceWhenHostIsEmpty) {
  TcpStoreServer server("", 0, kSecret);
  EXPECT_NE(server.port(), 0);
  auto store = makeTcpStore("127.0.0.1", server.port(), kSecret);
  store->set("k", bytesOf("v"));
  EXPECT_TRUE(store->check("k"));
}

TEST(TcpStore, LocalAddressOfNamesTheClientSocketsInterface) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto store = makeTcpStore("127.0.0.1", server.port(), kSecret);
  EXPECT_EQ(localAddressOf(*store), "127.0.0.1");
  PrefixStore prefixed("p/", std::make_shared<PrefixStore>("q/", store));
  EXPECT_EQ(localAddressOf(prefixed), "127.0.0.1");
  EXPECT_EQ(localAddressOf(*makeHashStore()), "");
  EXPECT_EQ(localAddressOf(*server.localStore()), "");
}

TEST(TcpStore, LocalStoreAndClientsShareOneMap) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto local = server.localStore();
  auto remote = makeTcpStore("127.0.0.1", server.port(), kSecret);
  std::thread arrive([&] {
    std::this_thread::sleep_for(milliseconds(100));
    remote->add("arrived", 1);
  });
  local->wait({"arrived"}, milliseconds(5000));
  local->set("go", bytesOf("1"));
  EXPECT_EQ(textOf(remote->get("go", milliseconds(1000))), "1");
  arrive.join();
}

TEST(TcpStore, BlockingGetDoesNotDelayOtherClientsOrThreads) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto shared = makeTcpStore("127.0.0.1", server.port(), kSecret);
  auto other = makeTcpStore("127.0.0.1", server.port(), kSecret);
  auto waiter = std::async(std::launch::async,
                           [&] { return textOf(shared->get("late", milliseconds(10000))); });
  std::this_thread::sleep_for(milliseconds(100));
  Stopwatch watch;
  for (int i = 0; i < 20; ++i) {
    other->add("busy", 1);
    shared->add("busy", 1);  // same client object as the blocked GET
  }
  EXPECT_TRUE(shared->check("busy"));
  EXPECT_LT(watch.elapsed().count(), 1000);
  EXPECT_EQ(waiter.wait_for(milliseconds(0)), std::future_status::timeout);
  other->set("late", bytesOf("now"));
  EXPECT_EQ(waiter.get(), "now");
}

TEST(TcpStore, DestroyingTheServerFailsAWaitingClientPromptly) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  auto store = makeTcpStore("127.0.0.1", server->port(), kSecret);
  auto waiter = std::async(std::launch::async, [&] {
    Stopwatch watch;
    EXPECT_THROW(store->get("never", std::chrono::seconds(30)), PeerFailure);
    return watch.elapsed();
  });
  std::this_thread::sleep_for(milliseconds(200));
  Stopwatch destroy;
  server.reset();
  EXPECT_LT(destroy.elapsed().count(), 2000) << "server destructor hung";
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "client still blocked after the server went away";
  EXPECT_LT(waiter.get().count(), 3000);
  // Later calls fail fast instead of hanging on a server that is gone.
  Stopwatch later;
  EXPECT_THROW(store->set("k", bytesOf("v")), PeerFailure);
  EXPECT_LT(later.elapsed().count(), 2000);
}

TEST(TcpStore, LocalWaitFailsWhenTheServerIsDestroyed) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  auto local = server->localStore();
  auto waiter = std::async(std::launch::async, [&] {
    EXPECT_THROW(local->wait({"never"}, std::chrono::seconds(30)), PeerFailure);
  });
  std::this_thread::sleep_for(milliseconds(100));
  server.reset();
  EXPECT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
}

TEST(TcpStore, ManyClientsOnManyThreadsGetExactTotals) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto store = makeTcpStore("127.0.0.1", server.port(), kSecret);
      for (int i = 0; i < 100; ++i) store->add("sum", 3);
      store->add("done", 1);
      store->wait({"done"}, milliseconds(5000));
    });
  }
  for (auto& thread : threads) thread.join();
  auto local = server.localStore();
  EXPECT_EQ(local->add("sum", 0), kThreads * 100 * 3);
  EXPECT_EQ(local->add("done", 0), kThreads);
  EXPECT_EQ(server.rejectedConnections(), 0u);
}

TEST(TcpStore, ValueOverTheFrameLimitIsRejectedBeforeSending) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto store = makeTcpStore("127.0.0.1", server.port(), kSecret);
  std::vector<char> huge((64u << 20) + 1);
  EXPECT_THROW(store->set("huge", huge), InvalidArgument);
  store->set("small", bytesOf("ok"));  // the client is still usable
  EXPECT_TRUE(store->check("small"));
}

TEST(TcpStore, AddOnTextValueIsInvalidArgument) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto store = makeTcpStore("127.0.0.1", server.port(), kSecret);
  store->set("text", bytesOf("abc"));
  EXPECT_THROW(store->add("text", 1), InvalidArgument);
  EXPECT_EQ(store->add("number", 2), 2);
}

}  // namespace
}  // namespace kolo::test
