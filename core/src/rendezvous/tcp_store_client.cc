// TcpStore: the client side of the TCP store.
//
// Threading: any number of threads may call one TcpStore. Each call borrows
// an authenticated connection from a small pool (opening a new one when all
// are busy) and returns it afterwards, so a long GET on one thread never
// delays a SET on another. A connection that saw any error is discarded, not
// returned. Every call is bounded: the server enforces GET/WAIT timeouts and
// the client gives up kReplySlack later; other calls wait at most kIoTimeout.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "kolo/error.h"
#include "kolo/tcp_store.h"
#include "rendezvous/auth.h"
#include "rendezvous/protocol.h"
#include "rendezvous/socket.h"

namespace kolo {

using namespace rendezvous;

namespace {

constexpr auto kReplySlack = std::chrono::seconds(5);
constexpr auto kIoTimeout = std::chrono::seconds(30);
// Opening an extra connection to a server already known to be up.
constexpr auto kReconnectTimeout = std::chrono::seconds(10);
constexpr size_t kMaxIdleConnections = 16;

std::chrono::milliseconds plusSlack(std::chrono::milliseconds timeout) {
  auto limit = std::chrono::milliseconds::max() - kReplySlack;
  return timeout >= limit ? std::chrono::milliseconds::max() : timeout + kReplySlack;
}

uint64_t timeoutToWire(std::chrono::milliseconds timeout) {
  return timeout.count() < 0 ? 0 : static_cast<uint64_t>(timeout.count());
}

// Requests this process sent to any TCP store (storeRequestsMade()).
std::atomic<uint64_t> requestsMade{0};

std::string seconds(Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f",
                std::chrono::duration<double>(d).count());
  return text;
}

class TcpStore : public Store {
 public:
  TcpStore(const std::string& host, uint16_t port, std::string secret,
           const TcpStoreOptions& options)
      : host_(host),
        port_(port),
        where_((host.empty() ? "127.0.0.1" : host) + ":" + std::to_string(port)),
        secret_(std::move(secret)) {
    Fd first = connectWithRetry(options.connectTimeout);
    localAddress_ = rendezvous::localAddress(first.get());
    idle_.push_back(std::move(first));
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    checkFits("SET '" + key + "'", key.size() + value.size());
    Writer request;
    request.u8(static_cast<uint8_t>(Command::kSet)).bytes(key).bytes(value);
    call(request, "SET '" + key + "'", deadlineAfter(kIoTimeout), [](Reader&) { return 0; });
  }

  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    Writer request;
    request.u8(static_cast<uint8_t>(Command::kGet)).bytes(key).u64(timeoutToWire(timeout));
    return call(request, "GET '" + key + "'", deadlineAfter(plusSlack(timeout)),
                [](Reader& in) { return in.bytes(); });
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    Writer request;
    request.u8(static_cast<uint8_t>(Command::kWait)).u32(static_cast<uint32_t>(keys.size()));
    for (const auto& key : keys) request.bytes(key);
    request.u64(timeoutToWire(timeout));
    call(request, "WAIT", deadlineAfter(plusSlack(timeout)), [](Reader&) { return 0; });
  }

  std::vector<std::vector<char>> multiGet(const std::vector<std::string>& keys,
                                          std::chrono::milliseconds timeout) override {
    Writer request;
    request.u8(static_cast<uint8_t>(Command::kMultiGet)).u32(static_cast<uint32_t>(keys.size()));
    for (const auto& key : keys) request.bytes(key);
    request.u64(timeoutToWire(timeout));
    const auto count = keys.size();
    return call(request, "MULTI_GET of " + std::to_string(count) + " keys",
                deadlineAfter(plusSlack(timeout)), [count](Reader& in) {
                  if (in.u32() != count) throw ProtocolError("wrong number of values");
                  std::vector<std::vector<char>> values;
                  values.reserve(count);
                  for (size_t i = 0; i < count; ++i) values.push_back(in.bytes());
                  return values;
                });
  }

  std::vector<bool> checkMany(const std::vector<std::string>& keys) override {
    Writer request;
    request.u8(static_cast<uint8_t>(Command::kCheckMany)).u32(static_cast<uint32_t>(keys.size()));
    for (const auto& key : keys) request.bytes(key);
    const auto count = keys.size();
    return call(request, "CHECK_MANY of " + std::to_string(count) + " keys",
                deadlineAfter(kIoTimeout), [count](Reader& in) {
                  if (in.u32() != count) throw ProtocolError("wrong number of answers");
                  std::vector<bool> present;
                  present.reserve(count);
                  for (size_t i = 0; i < count; ++i) present.push_back(in.u8() != 0);
                  return present;
                });
  }

  int64_t add(const std::string& key, int64_t delta) override {
    Writer request;
    request.u8(static_cast<uint8_t>(Command::kAdd)).bytes(key).i64(delta);
    return call(request, "ADD '" + key + "'", deadlineAfter(kIoTimeout),
                [](Reader& in) { return in.i64(); });
  }

  bool check(const std::string& key) override {
    Writer request;
    request.u8(static_cast<uint8_t>(Command::kCheck)).bytes(key);
    return call(request, "CHECK '" + key + "'", deadlineAfter(kIoTimeout),
                [](Reader& in) { return in.u8() != 0; });
  }

  std::string localAddress() const override { return localAddress_; }

 private:
  // Connects and authenticates once. Returns an invalid Fd with *error set
  // when the server cannot be reached; throws PeerFailure when it answers
  // but authentication fails (retrying cannot help).
  Fd openConnection(Deadline deadline, std::string* error) {
    Fd fd = connectTo(host_, port_, deadline, error);
    if (!fd.valid()) return fd;
    AuthResult auth = authenticateServer(fd.get(), secret_);
    if (auth.kind == AuthResult::kOk) return fd;
    if (auth.kind == AuthResult::kRefused) {
      throw PeerFailure("rendezvous store at " + where_ +
                        " refused our secret (KOLO_SECRET_KEY differs from the job's)");
    }
    if (auth.kind == AuthResult::kUnproven) {
      throw PeerFailure("rendezvous store at " + where_ +
                        " could not prove it knows the job's secret (KOLO_SECRET_KEY "
                        "differs, or another service owns that port)");
    }
    throw PeerFailure("rendezvous store at " + where_ + ": authentication failed: " +
                      auth.reason);
  }

  // The server may start after us: retry refused/unreachable connects with
  // backoff until connectTimeout.
  Fd connectWithRetry(std::chrono::milliseconds connectTimeout) {
    Clock::time_point start = Clock::now();
    Deadline deadline = deadlineAfter(connectTimeout);
    auto backoff = std::chrono::milliseconds(20);
    std::string error;
    for (;;) {
      Fd fd = openConnection(deadline, &error);
      if (fd.valid()) return fd;
      auto now = Clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
    throw Timeout("could not reach rendezvous store at " + where_ + " after " +
                  seconds(Clock::now() - start) + " s: " + error);
  }

  Fd acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        Fd fd = std::move(idle_.back());
        idle_.pop_back();
        return fd;
      }
    }
    std::string error;
    Fd fd = openConnection(deadlineAfter(kReconnectTimeout), &error);
    if (!fd.valid()) {
      throw PeerFailure("lost contact with rendezvous store at " + where_ + ": " + error);
    }
    return fd;
  }

  void release(Fd fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(fd));
  }

  static void checkFits(const std::string& what, size_t bytes) {
    if (bytes > kMaxFrameSize - 64) {
      throw InvalidArgument("rendezvous store: " + what + " needs " + std::to_string(bytes) +
                            " bytes; the store's limit is " +
                            std::to_string(kMaxFrameSize >> 20) + " MiB per request");
    }
  }

  // Sends one request and returns parse(reply fields after the OK status).
  // Throws Timeout / the server's error type for TIMEOUT / ERROR replies and
  // PeerFailure when the connection fails or the reply is malformed.
  template <typename Parse>
  auto call(const Writer& request, const std::string& what, Deadline deadline, Parse parse)
      -> decltype(parse(std::declval<Reader&>())) {
    checkFits(what, request.data().size());
    requestsMade.fetch_add(1, std::memory_order_relaxed);
    Fd fd = acquire();
    IoResult io = writeFrame(fd.get(), request.data(), deadlineAfter(kIoTimeout));
    std::vector<char> reply;
    if (io == IoResult::kOk) io = readFrame(fd.get(), &reply, kMaxFrameSize, deadline);
    if (io == IoResult::kTimeout) {
      throw PeerFailure("rendezvous store at " + where_ + " did not answer " + what +
                        " in time");
    }
    if (io == IoResult::kClosed) {
      throw PeerFailure("rendezvous store at " + where_ + " closed the connection during " +
                        what + " (did the server exit?)");
    }
    if (io != IoResult::kOk) {
      throw PeerFailure("rendezvous store at " + where_ + ": " + what + " failed: " +
                        describe(io));
    }
    Reply status;
    std::string message;
    ErrorCode code = ErrorCode::kInternal;
    try {
      Reader in(reply);
      status = static_cast<Reply>(in.u8());
      if (status == Reply::kOk) {
        auto result = parse(in);
        in.expectEnd();
        release(std::move(fd));
        return result;
      }
      if (status == Reply::kError) code = static_cast<ErrorCode>(in.u8());
      if (status == Reply::kTimeout || status == Reply::kError) message = in.string();
      in.expectEnd();
    } catch (const ProtocolError& e) {
      throw PeerFailure("rendezvous store at " + where_ + " sent a malformed reply to " +
                        what + ": " + e.what());
    }
    if (status == Reply::kTimeout) {
      release(std::move(fd));
      throw Timeout("rendezvous store at " + where_ + ": " + message);
    }
    if (status == Reply::kError) {
      release(std::move(fd));
      if (code == ErrorCode::kInvalidArgument) throw InvalidArgument(message);
      throw Internal("rendezvous store at " + where_ + ": " + message);
    }
    throw PeerFailure("rendezvous store at " + where_ + " sent an unknown reply status to " +
                      what);
  }

  const std::string host_;
  const uint16_t port_;
  const std::string where_;
  const std::string secret_;
  std::string localAddress_;  // fixed after construction

  std::mutex mu_;
  std::vector<Fd> idle_;  // authenticated connections not in use
};

}  // namespace

std::shared_ptr<Store> makeTcpStore(const std::string& host, uint16_t port,
                                    const std::string& secret, TcpStoreOptions options) {
  return std::make_shared<TcpStore>(host, port, secret, options);
}

std::string localAddressOf(const Store& store) { return store.localAddress(); }

uint64_t storeRequestsMade() { return requestsMade.load(std::memory_order_relaxed); }

}  // namespace kolo
