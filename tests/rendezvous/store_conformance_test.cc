// One suite for every Store implementation: HashStore, FileStore, TcpStore
// (client of a TcpStoreServer) and the server's localStore(). Each backend
// can hand out several independent clients of the same data, which is what
// the concurrency tests use.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <iterator>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "kolo/error.h"
#include "kolo/store.h"
#include "kolo/tcp_store.h"
#include "rendezvous_test_util.h"

namespace kolo::test {
namespace {

using std::chrono::milliseconds;

class Backend {
 public:
  virtual ~Backend() = default;
  // A new client of the backend's data (a separate connection / instance
  // where the backend has such a thing).
  virtual std::shared_ptr<Store> client() = 0;
};

class HashBackend : public Backend {
 public:
  std::shared_ptr<Store> client() override { return store_; }

 private:
  std::shared_ptr<Store> store_ = makeHashStore();
};

class FileBackend : public Backend {
 public:
  std::shared_ptr<Store> client() override { return makeFileStore(dir_.path() + "/store"); }

 private:
  TempDir dir_;
};

class TcpBackend : public Backend {
 public:
  std::shared_ptr<Store> client() override {
    return makeTcpStore("127.0.0.1", server_.port(), "conformance-secret");
  }

 private:
  TcpStoreServer server_{"127.0.0.1", 0, "conformance-secret"};
};

class TcpLocalBackend : public Backend {
 public:
  std::shared_ptr<Store> client() override { return server_.localStore(); }

 private:
  TcpStoreServer server_{"127.0.0.1", 0, "conformance-secret"};
};

std::unique_ptr<Backend> makeBackend(const std::string& name) {
  if (name == "hash") return std::make_unique<HashBackend>();
  if (name == "file") return std::make_unique<FileBackend>();
  if (name == "tcp") return std::make_unique<TcpBackend>();
  return std::make_unique<TcpLocalBackend>();
}

class StoreConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = makeBackend(GetParam());
    store_ = backend_->client();
  }

  std::unique_ptr<Backend> backend_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreConformance, SetThenGetReturnsTheValue) {
  std::vector<char> binary = {'a', '\0', '\xff', '\n', 'z'};
  store_->set("binary", binary);
  store_->set("empty", {});
  EXPECT_EQ(store_->get("binary", milliseconds(1000)), binary);
  EXPECT_TRUE(store_->get("empty", milliseconds(1000)).empty());
}

TEST_P(StoreConformance, SetOverwrites) {
  store_->set("k", bytesOf("first"));
  store_->set("k", bytesOf("second"));
  EXPECT_EQ(textOf(store_->get("k", milliseconds(1000))), "second");
}

TEST_P(StoreConformance, CheckReflectsPresenceWithoutBlocking) {
  EXPECT_FALSE(store_->check("k"));
  store_->set("k", bytesOf("v"));
  EXPECT_TRUE(store_->check("k"));
  EXPECT_FALSE(store_->check("other"));
}

TEST_P(StoreConformance, ValuesAreVisibleToOtherClients) {
  auto other = backend_->client();
  store_->set("shared", bytesOf("hello"));
  EXPECT_EQ(textOf(other->get("shared", milliseconds(1000))), "hello");
  EXPECT_TRUE(other->check("shared"));
}

TEST_P(StoreConformance, GetBlocksUntilAnotherClientSets) {
  auto writer = backend_->client();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(150));
    writer->set("late", bytesOf("arrived"));
  });
  Stopwatch watch;
  EXPECT_EQ(textOf(store_->get("late", milliseconds(5000))), "arrived");
  EXPECT_GE(watch.elapsed().count(), 100);
  setter.join();
}

TEST_P(StoreConformance, WaitReturnsOnceEveryKeyExists) {
  auto writer = backend_->client();
  std::thread setter([&] {
    for (const char* key : {"w1", "w2", "w3"}) {
      std::this_thread::sleep_for(milliseconds(40));
      writer->set(key, bytesOf("x"));
    }
  });
  store_->wait({"w1", "w2", "w3"}, milliseconds(5000));
  EXPECT_TRUE(store_->check("w3"));
  setter.join();
}

// Waiters on overlapping key lists (repeats included), one whose key add()
// creates, and one that timed out before its key came: each returns once
// its last key exists, whichever client writes it, and not before.
TEST_P(StoreConformance, ManyWaitersOnOverlappingKeysReturnWhenTheirLastKeyArrives) {
  EXPECT_THROW(store_->wait({"o-late"}, milliseconds(50)), Timeout);
  constexpr int kWaiters = 12;
  auto key = [](int i) { return "o" + std::to_string(i % kWaiters); };
  std::vector<std::vector<std::string>> lists;
  for (int i = 0; i < kWaiters; ++i) lists.push_back({key(i), key(i + 1), key(i), key(i + 5)});
  lists.push_back({"o-counter", "o-late"});
  std::vector<std::shared_ptr<Store>> clients;
  for (size_t i = 0; i < lists.size(); ++i) clients.push_back(backend_->client());
  std::vector<std::atomic<bool>> done(lists.size());
  std::vector<std::string> errors(lists.size());
  std::vector<std::thread> waiters;
  for (size_t i = 0; i < lists.size(); ++i) {
    waiters.emplace_back([&, i] {
      try {
        clients[i]->wait(lists[i], milliseconds(10000));
        done[i] = true;
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  // Every key but the last of o0..o11; the waiters that need it stay.
  for (int i = 0; i + 1 < kWaiters; ++i) store_->set(key(i), bytesOf("x"));
  store_->add("o-counter", 1);
  store_->set("o-late", bytesOf("x"));
  auto needsLast = [&](size_t i) {
    return std::count(lists[i].begin(), lists[i].end(), key(kWaiters - 1)) > 0;
  };
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto othersDone = [&] {
    for (size_t i = 0; i < lists.size(); ++i) {
      if (!needsLast(i) && !done[i]) return false;
    }
    return true;
  };
  while (!othersDone() && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  for (size_t i = 0; i < lists.size(); ++i) {
    EXPECT_EQ(done[i].load(), !needsLast(i)) << "waiter " << i;
  }
  store_->set(key(kWaiters - 1), bytesOf("x"));
  for (auto& t : waiters) t.join();
  for (size_t i = 0; i < lists.size(); ++i) {
    EXPECT_TRUE(done[i].load()) << "waiter " << i << ": " << errors[i];
  }
}

TEST_P(StoreConformance, GetTimesOutWithinBoundsNamingTheKey) {
  Stopwatch watch;
  try {
    store_->get("never-set", milliseconds(200));
    FAIL() << "get of a missing key returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("never-set"), std::string::npos) << e.what();
  }
  EXPECT_GE(watch.elapsed().count(), 190);
  EXPECT_LT(watch.elapsed().count(), 1500);
}

TEST_P(StoreConformance, WaitTimeoutNamesOnlyTheMissingKeys) {
  store_->set("present", bytesOf("x"));
  try {
    store_->wait({"present", "absent-1", "absent-2"}, milliseconds(150));
    FAIL() << "wait for missing keys returned";
  } catch (const Timeout& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("absent-1"), std::string::npos) << message;
    EXPECT_NE(message.find("absent-2"), std::string::npos) << message;
    EXPECT_EQ(message.find("present"), std::string::npos) << message;
  }
}

TEST_P(StoreConformance, MultiGetWaitsForEveryKeyAndKeepsTheirOrder) {
  auto writer = backend_->client();
  store_->set("m2", bytesOf("two"));
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(40));
    writer->set("m1", bytesOf("one"));
    writer->set("m3", bytesOf(""));
  });
  auto values = store_->multiGet({"m1", "m2", "m3"}, milliseconds(5000));
  setter.join();
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(textOf(values[0]), "one");
  EXPECT_EQ(textOf(values[1]), "two");
  EXPECT_EQ(textOf(values[2]), "");
  EXPECT_TRUE(store_->multiGet({}, milliseconds(0)).empty());
}

TEST_P(StoreConformance, MultiGetTimeoutNamesOnlyTheMissingKeys) {
  store_->set("present", bytesOf("x"));
  Stopwatch watch;
  try {
    store_->multiGet({"present", "lacking-1", "lacking-2"}, milliseconds(150));
    FAIL() << "multiGet of missing keys returned";
  } catch (const Timeout& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("lacking-1"), std::string::npos) << message;
    EXPECT_NE(message.find("lacking-2"), std::string::npos) << message;
    EXPECT_EQ(message.find("present"), std::string::npos) << message;
  }
  EXPECT_LT(watch.elapsed().count(), 1500);
}

TEST_P(StoreConformance, CheckManyAnswersEachKeyInOrderWithoutBlocking) {
  store_->set("c1", bytesOf("x"));
  store_->set("c3", bytesOf(""));
  Stopwatch watch;
  EXPECT_EQ(store_->checkMany({"c1", "c2", "c3", "c1"}), (std::vector<bool>{true, false, true, true}));
  EXPECT_TRUE(store_->checkMany({}).empty());
  EXPECT_LT(watch.elapsed().count(), 1000);
}

TEST_P(StoreConformance, ZeroTimeoutStillFindsExistingKeys) {
  store_->set("here", bytesOf("v"));
  EXPECT_EQ(textOf(store_->get("here", milliseconds(0))), "v");
  store_->wait({"here"}, milliseconds(0));
  Stopwatch watch;
  EXPECT_THROW(store_->get("not-here", milliseconds(0)), Timeout);
  EXPECT_LT(watch.elapsed().count(), 500);
}

TEST_P(StoreConformance, AddStartsAtZeroAndAccumulates) {
  EXPECT_EQ(store_->add("counter", 5), 5);
  EXPECT_EQ(store_->add("counter", -2), 3);
  EXPECT_EQ(store_->add("counter", 0), 3);
  EXPECT_EQ(textOf(store_->get("counter", milliseconds(1000))), "3");
  EXPECT_TRUE(store_->check("counter"));
}

TEST_P(StoreConformance, AddOnNonIntegerValueThrows) {
  store_->set("text", bytesOf("not a number"));
  EXPECT_ANY_THROW(store_->add("text", 1));
  EXPECT_EQ(textOf(store_->get("text", milliseconds(1000))), "not a number");
}

TEST_P(StoreConformance, ConcurrentAddsFromEightClientsAreExact) {
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 100;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kThreads; ++i) clients.push_back(backend_->client());
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAddsPerThread; ++i) seen[t].push_back(clients[t]->add("total", 1));
    });
  }
  for (auto& thread : threads) thread.join();
  // Every intermediate value was handed out exactly once.
  std::set<int64_t> all;
  for (const auto& values : seen) all.insert(values.begin(), values.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAddsPerThread));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAddsPerThread);
  EXPECT_EQ(store_->add("total", 0), kThreads * kAddsPerThread);
}

TEST_P(StoreConformance, OneClientIsSafeToShareBetweenThreads) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string key = "thread-" + std::to_string(t);
      for (int i = 0; i < 50; ++i) store_->add("shared-total", 2);
      store_->set(key, bytesOf(key));
      EXPECT_EQ(textOf(store_->get(key, milliseconds(2000))), key);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(store_->add("shared-total", 0), kThreads * 50 * 2);
}

TEST_P(StoreConformance, UnusualKeysStayDistinct) {
  std::vector<std::string> keys = {"",      "a/b",       "a%2Fb",       "..",
                                   ".lock", "with space", "\xc3\xbcnic\xc3\xb6" "de",
                                   std::string(1000, 'k'), std::string(1000, 'k') + "2"};
  for (size_t i = 0; i < keys.size(); ++i) store_->set(keys[i], bytesOf("v" + std::to_string(i)));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(textOf(store_->get(keys[i], milliseconds(1000))), "v" + std::to_string(i))
        << "key #" << i;
  }
}

TEST_P(StoreConformance, LargeValuesRoundTrip) {
  std::vector<char> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  store_->set("big", big);
  EXPECT_EQ(backend_->client()->get("big", milliseconds(5000)), big);
}

TEST_P(StoreConformance, PrefixStoresDoNotSeeEachOther) {
  PrefixStore a("gen1/", store_);
  PrefixStore b("gen2/", store_);
  a.set("rank0", bytesOf("A"));
  b.set("rank0", bytesOf("B"));
  EXPECT_EQ(textOf(a.get("rank0", milliseconds(1000))), "A");
  EXPECT_EQ(textOf(b.get("rank0", milliseconds(1000))), "B");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 10), 10);
  b.wait({"rank0", "n"}, milliseconds(1000));
  EXPECT_TRUE(store_->check("gen1/rank0"));
  EXPECT_FALSE(a.check("missing"));
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreConformance,
                         ::testing::Values("hash", "file", "tcp", "tcp_local"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kolo::test
