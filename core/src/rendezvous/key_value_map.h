// The data of a TCP store server: a map under a mutex whose waiters are woken
// by every write and by shutdown(). Shared by the server's connection threads
// and by TcpStoreServer::localStore(); all methods are thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
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
  bool allPresentLocked(const std::vector<std::string>& keys) const;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, std::vector<char>> data_;
  bool shutdown_ = false;
};

// A Store over a map in this process (TcpStoreServer::localStore()). Blocking
// calls throw kolo::PeerFailure once the map is shut down (server destroyed).
std::shared_ptr<Store> makeMapStore(std::shared_ptr<KeyValueMap> map);

// Message of the kolo::Timeout thrown when keys did not appear in time.
std::string timeoutMessage(std::chrono::milliseconds timeout, const std::string& missing);

}  // namespace kolo::rendezvous
