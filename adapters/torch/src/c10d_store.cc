#include "c10d_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kolo/error.h"

namespace kolo::torch::detail {
namespace {

// The IPv4 address of the interface the kernel would send from to reach
// host (a connected UDP socket sends nothing); empty when host does not
// resolve or routes through the loopback.
std::string addressRoutingTo(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (host.empty() || ::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || !found) return "";
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr &&
        std::strncmp(text, "127.", 4) != 0) {
      out = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return out;
}

std::string hostAddress() {
  if (const char* master = std::getenv("MASTER_ADDR")) {
    std::string routed = addressRoutingTo(master);
    if (!routed.empty()) return routed;
  }
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return addressRoutingTo(name);
}

class C10dStore : public kolo::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<::c10d::Store> store)
      : store_(std::move(store)), address_(hostAddress()) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    guarded("set", key, [&] { store_->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
  }

  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    wait({key}, timeout);
    std::vector<uint8_t> bytes;
    guarded("get", key, [&] { bytes = store_->get(key); });
    return std::vector<char>(bytes.begin(), bytes.end());
  }

  // Polls instead of blocking in the c10d store's wait: a blocked wait would
  // hold the store (below) against this process's other threads, and two
  // ranks' threads waiting for each other's keys would deadlock.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(100);
    while (true) {
      bool present = false;
      guarded("wait", keys.empty() ? std::string() : keys.front(),
              [&] { present = keys.empty() || store_->check(keys); });
      if (present) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string names;
        for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
        throw kolo::Timeout("torch's c10d store: " + names + " not set within " +
                            std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10000));
    }
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t out = 0;
    guarded("add", key, [&] { out = store_->add(key, delta); });
    return out;
  }

  bool check(const std::string& key) override {
    bool out = false;
    guarded("check", key, [&] { out = store_->check({key}); });
    return out;
  }

  std::string localAddress() const override { return address_; }

 private:
  // Runs op, turning the c10d store's errors into kolo's: a wait that ran
  // out is a Timeout (c10d says so in its message), anything else a
  // PeerFailure (the store's server is gone).
  // One call at a time: torch 1.13's TCPStore client is not thread-safe,
  // and the engines of a group use the store from several threads.
  template <typename Op>
  void guarded(const char* what, const std::string& key, Op&& op) {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      op();
    } catch (const kolo::Error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string text = e.what();
      const std::string message = std::string("torch's c10d store: ") + what + " '" + key +
                                  "' failed: " + text.substr(0, text.find('\n'));
      if (text.find("imeout") != std::string::npos || text.find("timed out") != std::string::npos) {
        throw kolo::Timeout(message);
      }
      throw kolo::PeerFailure(message);
    }
  }

  std::mutex mu_;
  c10::intrusive_ptr<::c10d::Store> store_;
  const std::string address_;
};

}  // namespace

std::shared_ptr<kolo::Store> adaptStore(c10::intrusive_ptr<::c10d::Store> store) {
  KOLO_CHECK_ARG(store, "kolo process group: no store (pass the one torch.distributed gives)");
  return std::make_shared<C10dStore>(std::move(store));
}

}  // namespace kolo::torch::detail
