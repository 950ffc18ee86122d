#include "rendezvous/key_value_map.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "kolo/error.h"

namespace kolo::rendezvous {

void KeyValueMap::set(const std::string& key, const std::vector<char>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool created = data_.insert_or_assign(key, value).second;
  if (created) wakeWaitersLocked(key);
}

void KeyValueMap::wakeWaitersLocked(const std::string& key) {
  // Notified under mu_: a waiter whose wait ended anyway (deadline) removes
  // itself under mu_ too, so it cannot be gone while notified here.
  auto [begin, end] = waiters_.equal_range(key);
  for (auto it = begin; it != end; ++it) {
    if (--it->second->missing == 0) it->second->cv.notify_one();
  }
}

std::optional<std::vector<char>> KeyValueMap::tryGet(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

bool KeyValueMap::check(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.count(key) != 0;
}

int64_t KeyValueMap::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    const bool created = it == data_.end();
    if (it != data_.end()) {
      std::string text(it->second.begin(), it->second.end());
      char* end = nullptr;
      errno = 0;
      long long parsed = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
        throw InvalidArgument("store: add() on key '" + key +
                              "' whose value is not a decimal integer");
      }
      value = parsed;
    }
    if (__builtin_add_overflow(value, delta, &value)) {
      throw InvalidArgument("store: add(" + std::to_string(delta) + ") on key '" + key +
                            "' overflows int64");
    }
    std::string text = std::to_string(value);
    data_[key] = std::vector<char>(text.begin(), text.end());
    if (created) wakeWaitersLocked(key);
  }
  return value;
}

bool KeyValueMap::waitFor(const std::vector<std::string>& keys, Deadline deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (shutdown_) return false;
  std::vector<const std::string*> absent;  // distinct
  for (const auto& key : keys) {
    if (data_.count(key) == 0) absent.push_back(&key);
  }
  if (absent.empty()) return true;
  auto byValue = [](const std::string* a, const std::string* b) { return *a < *b; };
  auto same = [](const std::string* a, const std::string* b) { return *a == *b; };
  std::sort(absent.begin(), absent.end(), byValue);
  absent.erase(std::unique(absent.begin(), absent.end(), same), absent.end());
  Waiter waiter;
  waiter.missing = absent.size();
  for (const std::string* key : absent) waiters_.emplace(*key, &waiter);
  auto done = [&] { return shutdown_ || waiter.missing == 0; };
  if (deadline == kNoDeadline) {
    waiter.cv.wait(lock, done);
  } else {
    waiter.cv.wait_until(lock, deadline, done);
  }
  // By key and address: a rehash (another waiter's insert) invalidates
  // iterators into waiters_.
  for (const std::string* key : absent) {
    auto [begin, end] = waiters_.equal_range(*key);
    for (auto it = begin; it != end; ++it) {
      if (it->second == &waiter) {
        waiters_.erase(it);
        break;
      }
    }
  }
  return !shutdown_ && waiter.missing == 0;
}

std::string KeyValueMap::missing(const std::vector<std::string>& keys) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& key : keys) {
    if (data_.count(key) == 0) out += (out.empty() ? "" : ", ") + key;
  }
  return out;
}

void KeyValueMap::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  for (auto& [key, waiter] : waiters_) waiter->cv.notify_one();
}

bool KeyValueMap::isShutdown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_;
}

std::string timeoutMessage(std::chrono::milliseconds timeout, const std::string& missing) {
  return "timed out after " + std::to_string(timeout.count()) +
         " ms waiting for keys: " + missing;
}

namespace {

class MapStore : public Store {
 public:
  explicit MapStore(std::shared_ptr<KeyValueMap> map) : map_(std::move(map)) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    map_->set(key, value);
  }

  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    waitOrThrow({key}, timeout);
    return *map_->tryGet(key);  // keys are never erased
  }

  void wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override {
    waitOrThrow(keys, timeout);
  }

  int64_t add(const std::string& key, int64_t delta) override { return map_->add(key, delta); }

  bool check(const std::string& key) override { return map_->check(key); }

 private:
  void waitOrThrow(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    if (map_->waitFor(keys, deadlineAfter(timeout))) return;
    if (map_->isShutdown()) {
      throw PeerFailure("rendezvous store: the server was shut down while waiting for keys: " +
                        map_->missing(keys));
    }
    throw Timeout("rendezvous store (local): " + timeoutMessage(timeout, map_->missing(keys)));
  }

  std::shared_ptr<KeyValueMap> map_;
};

}  // namespace

std::shared_ptr<Store> makeMapStore(std::shared_ptr<KeyValueMap> map) {
  return std::make_shared<MapStore>(std::move(map));
}

}  // namespace kolo::rendezvous
