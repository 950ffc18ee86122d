// TcpStoreServer: one accept thread plus one thread per connection.
//
// Threading: the accept thread owns Impl::connections (spawns and reaps); the
// destructor touches it only after joining the accept thread. Connection
// threads share nothing but the KeyValueMap (internally locked), the stop
// signal and the rejected counter. Every blocking step of a connection
// thread wakes on the stop signal or on map shutdown, so the destructor
// returns promptly and joins every thread.
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <list>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "kolo/error.h"
#include "kolo/tcp_store.h"
#include "rendezvous/auth.h"
#include "rendezvous/key_value_map.h"
#include "rendezvous/protocol.h"
#include "rendezvous/socket.h"

namespace kolo {

using namespace rendezvous;

namespace {

// Beyond this many open connections new ones are closed at once.
constexpr size_t kMaxConnections = 4096;
// How often a blocked GET/WAIT checks whether its client went away.
constexpr auto kWaitSlice = std::chrono::milliseconds(200);
// A client that does not read its reply within this time is dropped.
constexpr auto kReplyTimeout = std::chrono::seconds(30);
// The accept loop wakes at least this often to reap finished threads.
constexpr int kReapIntervalMs = 250;

void logLine(const std::string& line) {
  std::fprintf(stderr, "kolo store: %s\n", line.c_str());
}

std::chrono::milliseconds timeoutFromWire(uint64_t ms) {
  constexpr uint64_t kMax = uint64_t{1} << 62;
  return std::chrono::milliseconds(static_cast<int64_t>(ms > kMax ? kMax : ms));
}

enum class WaitOutcome { kReady, kTimedOut, kAbandoned };

}  // namespace

struct TcpStoreServer::Impl {
  struct Connection {
    std::thread thread;
    std::atomic<bool> finished{false};
  };

  std::string secret;
  Fd listenFd;
  uint16_t port = 0;
  StopSignal stop;
  std::shared_ptr<KeyValueMap> map = std::make_shared<KeyValueMap>();
  std::atomic<uint64_t> rejected{0};
  std::atomic<bool> stopping{false};  // set before the stop signal is raised
  std::list<std::unique_ptr<Connection>> connections;  // see threading note
  std::thread acceptThread;

  void acceptLoop();
  void reapFinished();
  void spawn(Fd fd, const std::string& peer);
  void serve(int fd, const std::string& peer);
  // The reply to one request, or nullopt when the connection should close
  // without one (server stopping, client gone). Throws ProtocolError.
  std::optional<std::vector<char>> handle(const std::vector<char>& request, int fd);
  WaitOutcome waitKeys(const std::vector<std::string>& keys,
                       std::chrono::milliseconds timeout, int fd);
  void reject(const std::string& peer, const std::string& verb, const std::string& why) {
    // Log first: a reader that sees the count has its line to read too.
    logLine(verb + " connection from " + peer + ": " + why);
    rejected.fetch_add(1);
  }
};

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port, std::string secret)
    : impl_(std::make_unique<Impl>()) {
  impl_->secret = std::move(secret);
  impl_->listenFd = listenOn(host, port);
  impl_->port = localPort(impl_->listenFd.get());
  impl_->acceptThread = std::thread([impl = impl_.get()] { impl->acceptLoop(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->stopping.store(true);
  impl_->stop.raise();
  impl_->map->shutdown();
  impl_->acceptThread.join();
  impl_->listenFd.reset();  // refuse new connections from here on
  for (auto& connection : impl_->connections) connection->thread.join();
}

uint16_t TcpStoreServer::port() const { return impl_->port; }

uint64_t TcpStoreServer::rejectedConnections() const { return impl_->rejected.load(); }

std::shared_ptr<Store> TcpStoreServer::localStore() const { return makeMapStore(impl_->map); }

void TcpStoreServer::Impl::acceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listenFd.get(), POLLIN, 0}, {stop.fd(), POLLIN, 0}};
    int n = ::poll(fds, 2, kReapIntervalMs);
    if (fds[1].revents & POLLIN) return;
    reapFinished();
    if (n <= 0 || !(fds[0].revents & POLLIN)) continue;
    for (;;) {
      std::string peer;
      Fd fd = acceptOne(listenFd.get(), &peer);
      if (!fd.valid()) {
        // Out of descriptors or memory: back off instead of spinning on a
        // listening socket that stays readable.
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          logLine("accept() failed: " + errnoText(errno));
          pollfd wake{stop.fd(), POLLIN, 0};
          ::poll(&wake, 1, kReapIntervalMs);
        }
        break;
      }
      if (connections.size() >= kMaxConnections) {
        reject(peer, "refused", "too many open connections (" +
                                    std::to_string(kMaxConnections) + ")");
        continue;
      }
      spawn(std::move(fd), peer);
    }
  }
}

void TcpStoreServer::Impl::reapFinished() {
  for (auto it = connections.begin(); it != connections.end();) {
    if ((*it)->finished.load()) {
      (*it)->thread.join();
      it = connections.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpStoreServer::Impl::spawn(Fd fd, const std::string& peer) {
  auto connection = std::make_unique<Connection>();
  Connection* c = connection.get();
  try {
    c->thread = std::thread([this, c, peer, fd = std::move(fd)]() {
      try {
        serve(fd.get(), peer);
      } catch (const std::exception& e) {
        logLine("connection from " + peer + " failed: " + e.what());
      }
      c->finished.store(true);
    });
  } catch (const std::system_error& e) {
    logLine("cannot start a thread for " + peer + ": " + e.what());
    return;  // the lambda never ran; its captured Fd closed the socket
  }
  connections.push_back(std::move(connection));
}

void TcpStoreServer::Impl::serve(int fd, const std::string& peer) {
  AuthResult auth = authenticateClient(fd, secret, stop.fd());
  if (auth.kind != AuthResult::kOk) {
    if (!stopping.load()) {
      reject(peer, "refused",
             auth.kind == AuthResult::kRefused ? auth.reason : "handshake failed: " + auth.reason);
    }
    return;
  }
  std::vector<char> request;
  for (;;) {
    IoResult io = readFrame(fd, &request, kMaxFrameSize, kNoDeadline, stop.fd());
    if (io == IoResult::kTooLarge) {
      reject(peer, "dropped", "frame exceeds the " + std::to_string(kMaxFrameSize >> 20) +
                                  " MiB limit");
      return;
    }
    if (io != IoResult::kOk) return;  // client left or server stopping
    std::optional<std::vector<char>> reply;
    try {
      reply = handle(request, fd);
    } catch (const ProtocolError& e) {
      reject(peer, "dropped", std::string("malformed request: ") + e.what());
      return;
    }
    if (!reply) return;
    if (writeFrame(fd, *reply, deadlineAfter(kReplyTimeout), stop.fd()) != IoResult::kOk) {
      return;
    }
  }
}

std::optional<std::vector<char>> TcpStoreServer::Impl::handle(
    const std::vector<char>& request, int fd) {
  Reader in(request);
  auto command = static_cast<Command>(in.u8());
  Writer out;
  auto waitAndReply = [&](const std::vector<std::string>& keys,
                          std::chrono::milliseconds timeout) -> bool {
    WaitOutcome outcome = waitKeys(keys, timeout, fd);
    if (outcome == WaitOutcome::kTimedOut) {
      out.u8(static_cast<uint8_t>(Reply::kTimeout))
          .bytes(timeoutMessage(timeout, map->missing(keys)));
    }
    return outcome != WaitOutcome::kAbandoned;
  };

  switch (command) {
    case Command::kSet: {
      std::string key = in.string();
      std::vector<char> value = in.bytes();
      in.expectEnd();
      map->set(key, value);
      out.u8(static_cast<uint8_t>(Reply::kOk));
      break;
    }
    case Command::kGet: {
      std::string key = in.string();
      auto timeout = timeoutFromWire(in.u64());
      in.expectEnd();
      if (!waitAndReply({key}, timeout)) return std::nullopt;
      if (out.data().empty()) out.u8(static_cast<uint8_t>(Reply::kOk)).bytes(*map->tryGet(key));
      break;
    }
    case Command::kWait:
    case Command::kMultiGet: {
      const bool values = command == Command::kMultiGet;
      uint32_t count = in.u32();
      if (count > request.size()) throw ProtocolError("WAIT announces too many keys");
      std::vector<std::string> keys;
      keys.reserve(count);
      for (uint32_t i = 0; i < count; ++i) keys.push_back(in.string());
      auto timeout = timeoutFromWire(in.u64());
      in.expectEnd();
      if (!waitAndReply(keys, timeout)) return std::nullopt;
      if (!out.data().empty()) break;  // timed out
      out.u8(static_cast<uint8_t>(Reply::kOk));
      if (values) {
        out.u32(count);
        for (const auto& key : keys) out.bytes(*map->tryGet(key));
      }
      break;
    }
    case Command::kAdd: {
      std::string key = in.string();
      int64_t delta = in.i64();
      in.expectEnd();
      try {
        int64_t value = map->add(key, delta);
        out.u8(static_cast<uint8_t>(Reply::kOk)).i64(value);
      } catch (const Error& e) {
        out.u8(static_cast<uint8_t>(Reply::kError))
            .u8(static_cast<uint8_t>(e.code()))
            .bytes(std::string(e.what()));
      }
      break;
    }
    case Command::kCheckMany: {
      uint32_t count = in.u32();
      if (count > request.size()) throw ProtocolError("CHECK_MANY announces too many keys");
      std::vector<std::string> keys;
      keys.reserve(count);
      for (uint32_t i = 0; i < count; ++i) keys.push_back(in.string());
      in.expectEnd();
      out.u8(static_cast<uint8_t>(Reply::kOk)).u32(count);
      for (const auto& key : keys) out.u8(map->check(key) ? 1 : 0);
      break;
    }
    case Command::kCheck: {
      std::string key = in.string();
      in.expectEnd();
      out.u8(static_cast<uint8_t>(Reply::kOk)).u8(map->check(key) ? 1 : 0);
      break;
    }
    default:
      throw ProtocolError("unknown command " + std::to_string(static_cast<int>(command)));
  }
  return out.take();
}

// Waits in slices so a client that disconnects, or a server that stops,
// frees this thread within kWaitSlice instead of at the client's timeout.
WaitOutcome TcpStoreServer::Impl::waitKeys(const std::vector<std::string>& keys,
                                           std::chrono::milliseconds timeout, int fd) {
  Deadline deadline = deadlineAfter(timeout);
  for (;;) {
    Deadline slice = std::min(deadline, Clock::now() + kWaitSlice);
    if (map->waitFor(keys, slice)) return WaitOutcome::kReady;
    if (map->isShutdown() || peerClosed(fd)) return WaitOutcome::kAbandoned;
    if (Clock::now() >= deadline) return WaitOutcome::kTimedOut;
  }
}

}  // namespace kolo
