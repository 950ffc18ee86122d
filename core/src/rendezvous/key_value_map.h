// The data of a TCP store server: a map under a mutex. A waiter is woken
// when the last of its keys appears (or by shutdown()), not by every write:
// at start-up every rank of a large job waits on the server at once, and
// waking all of them per write would be O(N^2) wake-ups behind one lock.
// Shared by the server's connection threads and by
// TcpStoreServer::localStore(); all methods are thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kolo/store.h"
#include "rendezvous/socket.h"

namespace kolo::rendezvous {

class KeyValueMap {
 public:
  void set(const std::string& key, const std::vector<char>& value);
  std::optional<std::vector<char>> tryGet(const std::string& key) const;
  bool check(const std::string& key) const;
  // Throws kolo::InvalidArgument when the stored value is not a decimal
  // integer or the sum overflows.
  int64_t add(const std::string& key, int64_t delta);

  // Blocks until every key exists (true), or the deadline passes or
  // shutdown() was called (false).
  bool waitFor(const std::vector<std::string>& keys, Deadline deadline) const;
  // The keys of the list that do not exist now, comma-separated.
  std::string missing(const std::vector<std::string>& keys) const;

  // Wakes every waiter; waits return false from now on. Irreversible.
  void shutdown();
  bool isShutdown() const;

 private:
  // One blocked waitFor: woken when missing reaches 0.
  struct Waiter {
    std::condition_variable cv;
    size_t missing = 0;  // distinct keys of its list not present yet
  };
  // After key was written for the first time (under mu_).
  void wakeWaitersLocked(const std::string& key);

  mutable std::mutex mu_;
  std::map<std::string, std::vector<char>> data_;
  // A waiter under each key it misses; keys are never erased, so each
  // entry is counted down once, by the write that creates its key.
  mutable std::unordered_multimap<std::string, Waiter*> waiters_;
  bool shutdown_ = false;
};

// A Store over a map in this process (TcpStoreServer::localStore()). Blocking
// calls throw kolo::PeerFailure once the map is shut down (server destroyed).
std::shared_ptr<Store> makeMapStore(std::shared_ptr<KeyValueMap> map);

// Message of the kolo::Timeout thrown when keys did not appear in time.
std::string timeoutMessage(std::chrono::milliseconds timeout, const std::string& missing);

}  // namespace kolo::rendezvous
