/// \file
/// Rendezvous key-value store: how ranks find each other.
///
/// Implementations: HashStore (in-process, for tests running ranks as threads),
/// FileStore (shared filesystem), TcpStore (client of a TcpStoreServer hosted
/// by kolorun or by rank 0). All methods are thread-safe and bounded in time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kolo {

/// A key-value store the ranks of a job share for rendezvous. Values are
/// bytes; keys are never deleted. Implementations are thread-safe.
class Store {
 public:
  virtual ~Store() = default;  ///< Stores are held as std::shared_ptr<Store>.

  /// Stores value under key, replacing any value there; waiters on key wake.
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;

  /// Blocks until the key exists or timeout passes; throws kolo::Timeout.
  virtual std::vector<char> get(const std::string& key,
                                std::chrono::milliseconds timeout) = 0;

  /// Blocks until all keys exist or timeout passes; throws kolo::Timeout
  /// naming the missing keys.
  virtual void wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) = 0;

  /// Atomically adds delta to the integer stored at key (0 when missing) and
  /// returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  /// True when the key exists now; never blocks.
  virtual bool check(const std::string& key) = 0;

  /// Which of keys exist now, in their order; never blocks. The TCP store
  /// answers in one request; the default checks each.
  virtual std::vector<bool> checkMany(const std::vector<std::string>& keys) {
    std::vector<bool> present;
    present.reserve(keys.size());
    for (const auto& key : keys) present.push_back(check(key));
    return present;
  }

  /// Blocks until all keys exist or timeout passes, then returns their
  /// values in the order of keys; throws kolo::Timeout naming the missing
  /// keys. The TCP store does it in one request (start-up reads many peers'
  /// addresses at once this way); the default waits, then gets each.
  virtual std::vector<std::vector<char>> multiGet(const std::vector<std::string>& keys,
                                                  std::chrono::milliseconds timeout) {
    wait(keys, timeout);
    std::vector<std::vector<char>> values;
    values.reserve(keys.size());
    for (const auto& key : keys) values.push_back(get(key, timeout));
    return values;
  }

  /// The address of this host's interface that reaches the store's server
  /// (peers reach this rank there when KOLO_IFACE names none); empty when
  /// the store cannot tell (in-process and file stores).
  virtual std::string localAddress() const { return ""; }
};

/// Wraps a store so every key gets a prefix; used to separate engine
/// generations and subsystems sharing one store.
class PrefixStore : public Store {
 public:
  /// Every key becomes prefix + key in inner, which the PrefixStore keeps
  /// alive.
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
      : prefix_(std::move(prefix)), inner_(std::move(inner)) {}

  /// Store::set on prefix + key (and so on for the other overrides).
  void set(const std::string& key, const std::vector<char>& value) override {
    inner_->set(prefix_ + key, value);
  }
  std::vector<char> get(const std::string& key,
                        std::chrono::milliseconds timeout) override {
    return inner_->get(prefix_ + key, timeout);
  }
  void wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    inner_->wait(full, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return inner_->add(prefix_ + key, delta);
  }
  bool check(const std::string& key) override {
    return inner_->check(prefix_ + key);
  }
  std::vector<bool> checkMany(const std::vector<std::string>& keys) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    return inner_->checkMany(full);
  }
  std::vector<std::vector<char>> multiGet(const std::vector<std::string>& keys,
                                          std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    return inner_->multiGet(full, timeout);
  }
  std::string localAddress() const override {
    return inner_ ? inner_->localAddress() : std::string();
  }

  /// The wrapped store (localAddressOf() looks through prefixes with it).
  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

/// In-process store for ranks running as threads of one process: every
/// engine given the same returned store (or PrefixStores of it) meets.
std::shared_ptr<Store> makeHashStore();

/// Store over files in a directory every rank can see (created when
/// missing). Throws InvalidArgument for an empty path and when the directory
/// cannot be created or written.
std::shared_ptr<Store> makeFileStore(const std::string& directory);

}  // namespace kolo
