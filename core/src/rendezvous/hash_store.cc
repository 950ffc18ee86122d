// In-process store: a map under a mutex, waiters woken by a condition variable.
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo {
namespace {

class HashStore : public Store {
 public:
  void set(const std::string& key, const std::vector<char>& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      data_[key] = value;
    }
    cv_.notify_all();
  }

  std::vector<char> get(const std::string& key,
                        std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    waitLocked(lock, {key}, timeout);
    return data_.at(key);
  }

  void wait(const std::vector<std::string>& keys,
            std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    waitLocked(lock, keys, timeout);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t value = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = data_.find(key);
      if (it != data_.end()) {
        std::string text(it->second.begin(), it->second.end());
        char* end = nullptr;
        value = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0') {
          throw InvalidArgument("store: add() on key '" + key + "' whose value is not an integer");
        }
      }
      value += delta;
      std::string text = std::to_string(value);
      data_[key] = std::vector<char>(text.begin(), text.end());
    }
    cv_.notify_all();
    return value;
  }

  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return data_.count(key) != 0;
  }

 private:
  void waitLocked(std::unique_lock<std::mutex>& lock,
                  const std::vector<std::string>& keys,
                  std::chrono::milliseconds timeout) {
    auto allThere = [&] {
      for (const auto& k : keys) {
        if (data_.count(k) == 0) return false;
      }
      return true;
    };
    if (cv_.wait_for(lock, timeout, allThere)) return;
    std::string missing;
    for (const auto& k : keys) {
      if (data_.count(k) == 0) missing += (missing.empty() ? "" : ", ") + k;
    }
    throw Timeout("store: timed out after " + std::to_string(timeout.count()) +
                  " ms waiting for keys: " + missing);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> data_;
};

}  // namespace

std::shared_ptr<Store> makeHashStore() { return std::make_shared<HashStore>(); }

}  // namespace kolo
