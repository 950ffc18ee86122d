#include "comm/tcp/mesh.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "kolo/error.h"
#include "common/ranks_text.h"
#include "comm/tcp/interfaces.h"

namespace kolo::comm::tcp {
namespace {

using rendezvous::Clock;
using rendezvous::Deadline;
using rendezvous::Fd;
using rendezvous::IoResult;

constexpr uint32_t kHelloMagic = 0x4b434c48;  // "KCLH"
constexpr uint32_t kAckMagic = 0x4b434c41;    // "KCLA"
constexpr uint32_t kFrameMagic = 0x4b434c46;  // "KCLF"
constexpr uint32_t kVersion = 1;
constexpr size_t kTokenBytes = 16;
// A connection must say hello this soon after it is accepted.
constexpr auto kHelloTimeout = std::chrono::seconds(5);

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint32_t from;
  uint32_t to;
  uint32_t size;
  std::array<uint8_t, kTokenBytes> token;
};

struct Ack {
  uint32_t magic;
  uint32_t from;
};

struct FrameHeader {
  uint32_t magic;
  uint32_t sequence;
  uint64_t length;
};
static_assert(sizeof(FrameHeader) == 16, "frame header is 16 bytes on the wire");

std::array<uint8_t, kTokenBytes> randomToken() {
  std::random_device device;
  std::array<uint8_t, kTokenBytes> token{};
  for (auto& b : token) b = static_cast<uint8_t>(device());
  return token;
}

std::chrono::milliseconds left(Deadline deadline) {
  auto now = Clock::now();
  if (now >= deadline) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
}

// "host:port" -> parts; throws Internal on a malformed value (it came from
// a peer through the store).
std::pair<std::string, uint16_t> splitAddress(const std::vector<char>& bytes, int rank) {
  std::string text(bytes.begin(), bytes.end());
  auto colon = text.rfind(':');
  int port = colon == std::string::npos ? -1 : std::atoi(text.c_str() + colon + 1);
  if (colon == std::string::npos || port <= 0 || port > 65535) {
    throw Internal("control connect: rank " + std::to_string(rank) +
                   " published a malformed address '" + text + "'");
  }
  return {text.substr(0, colon), static_cast<uint16_t>(port)};
}

// Reads the hello of a freshly accepted connection; returns the peer rank or
// -1 (with the reason) when the connection is not one of ours.
int readHello(int fd, int rank, int size, const std::array<uint8_t, kTokenBytes>& token,
              Deadline deadline, std::string* why) {
  Hello hello{};
  auto helloDeadline = std::min(deadline, Clock::now() + kHelloTimeout);
  IoResult got = rendezvous::recvAll(fd, &hello, sizeof(hello), helloDeadline);
  if (got != IoResult::kOk) {
    *why = std::string("no hello: ") + rendezvous::describe(got);
    return -1;
  }
  if (hello.magic != kHelloMagic || hello.version != kVersion) {
    *why = "not a kolo control connection";
    return -1;
  }
  if (hello.token != token) {
    *why = "wrong job token";
    return -1;
  }
  if (hello.to != static_cast<uint32_t>(rank) || hello.size != static_cast<uint32_t>(size) ||
      hello.from <= static_cast<uint32_t>(rank) || hello.from >= static_cast<uint32_t>(size)) {
    *why = "hello from rank " + std::to_string(hello.from) + " of " + std::to_string(hello.size) +
           " for rank " + std::to_string(hello.to);
    return -1;
  }
  return static_cast<int>(hello.from);
}

}  // namespace

Mesh::Mesh(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout), peers_(size) {}

Mesh::~Mesh() = default;

std::unique_ptr<Mesh> Mesh::connect(const BackendArgs& args, const std::string& what) {
  const int rank = args.identity.rank;
  const int size = args.identity.size;
  KOLO_CHECK_ARG(size >= 1 && rank >= 0 && rank < size,
                 what + ": bad identity rank " + std::to_string(rank) + " of size " +
                     std::to_string(size));
  KOLO_CHECK_ARG(args.store != nullptr, what + ": no rendezvous store");
  KOLO_CHECK_ARG(args.config.timeout.count() > 0, what + ": timeout must be positive");
  std::unique_ptr<Mesh> mesh(new Mesh(rank, size, args.config.timeout));
  if (size == 1) return mesh;

  const std::string host = !args.config.iface.empty() ? chooseInterface(args.config.iface).address
                           : args.localAddress.empty() ? "127.0.0.1"
                                                       : args.localAddress;
  Fd listener;
  try {
    listener = rendezvous::listenOn(host, 0);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(what + ": cannot listen on " + host + " (" + e.what() + ")");
  }
  const std::string address = host + ":" + std::to_string(rendezvous::localPort(listener.get()));
  Store& store = *args.store;
  store.set("addr/" + std::to_string(rank), std::vector<char>(address.begin(), address.end()));

  const auto deadline = rendezvous::deadlineAfter(args.config.timeout);
  std::array<uint8_t, kTokenBytes> token{};
  if (rank == 0) {
    token = randomToken();
    store.set("token", std::vector<char>(token.begin(), token.end()));
  } else {
    std::vector<char> bytes;
    try {
      bytes = store.get("token", left(deadline));
    } catch (const Timeout&) {
      throw Timeout(what + ": rank 0 never published the job token within " +
                    std::to_string(args.config.timeout.count()) + " ms");
    }
    if (bytes.size() != kTokenBytes) throw Internal(what + ": malformed job token in the store");
    std::memcpy(token.data(), bytes.data(), kTokenBytes);
  }

  // Lower ranks: connect, say hello, wait for the answer.
  for (int peer = 0; peer < rank; ++peer) {
    std::vector<char> bytes;
    try {
      bytes = store.get("addr/" + std::to_string(peer), left(deadline));
    } catch (const Timeout&) {
      throw Timeout(what + ": rank " + std::to_string(peer) + " did not arrive within " +
                    std::to_string(args.config.timeout.count()) + " ms");
    }
    auto [peerHost, peerPort] = splitAddress(bytes, peer);
    std::string error;
    Fd fd = rendezvous::connectTo(peerHost, peerPort, deadline, &error);
    if (!fd.valid()) {
      throw PeerFailure(what + ": cannot connect to rank " + std::to_string(peer) + " at " +
                        peerHost + ":" + std::to_string(peerPort) + ": " + error);
    }
    Hello hello{kHelloMagic, kVersion, static_cast<uint32_t>(rank), static_cast<uint32_t>(peer),
                static_cast<uint32_t>(size), token};
    Ack ack{};
    IoResult io = rendezvous::sendAll(fd.get(), &hello, sizeof(hello), deadline);
    if (io == IoResult::kOk) io = rendezvous::recvAll(fd.get(), &ack, sizeof(ack), deadline);
    if (io == IoResult::kTimeout) {
      throw Timeout(what + ": rank " + std::to_string(peer) + " did not answer within " +
                    std::to_string(args.config.timeout.count()) + " ms");
    }
    if (io != IoResult::kOk || ack.magic != kAckMagic || ack.from != static_cast<uint32_t>(peer)) {
      throw PeerFailure(what + ": rank " + std::to_string(peer) + " refused the connection (" +
                        (io == IoResult::kOk ? "bad answer" : rendezvous::describe(io)) +
                        "; is another job using the same rendezvous?)");
    }
    mesh->peers_[peer] = std::move(fd);
  }

  // Higher ranks: accept until each has said hello; anything else is dropped.
  int waiting = size - 1 - rank;
  while (waiting > 0) {
    pollfd pfd{listener.get(), POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left(deadline).count(), INT_MAX)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::vector<int> missing;
      for (int r = rank + 1; r < size; ++r) {
        if (!mesh->peers_[r].valid()) missing.push_back(r);
      }
      throw Timeout(what + ": " + ranksPhrase(missing) + " did not connect within " +
                    std::to_string(args.config.timeout.count()) + " ms");
    }
    Fd fd = rendezvous::acceptOne(listener.get(), nullptr);
    if (!fd.valid()) continue;
    std::string why;
    int from = readHello(fd.get(), rank, size, token, deadline, &why);
    if (from < 0 || mesh->peers_[from].valid()) continue;  // dropped: fd closes here
    Ack ack{kAckMagic, static_cast<uint32_t>(rank)};
    if (rendezvous::sendAll(fd.get(), &ack, sizeof(ack), deadline) != IoResult::kOk) continue;
    mesh->peers_[from] = std::move(fd);
    --waiting;
  }
  return mesh;
}

void Mesh::transfer(const char* what, std::vector<Send> sends, std::vector<Recv> recvs) {
  if (failed_) {
    const std::string message = std::string("control ") + what +
                                " failed: backend unusable after an earlier failure: " + failure_;
    if (failedByTimeout_) throw Timeout(message);
    throw PeerFailure(message);
  }
  const uint32_t sequence = sequence_++;

  struct Out {
    int fd;
    FrameHeader header;
    const char* data;
    uint64_t done = 0;  // bytes of header + data sent
  };
  struct In {
    int fd;
    Recv recv;
    FrameHeader header{};
    uint64_t done = 0;  // bytes of header + data received
    char* dst = nullptr;
  };
  std::vector<Out> outs;
  std::vector<In> ins;
  outs.reserve(sends.size());
  ins.reserve(recvs.size());
  for (const auto& s : sends) {
    outs.push_back(Out{peers_[s.to].get(), FrameHeader{kFrameMagic, sequence, s.length}, s.data});
  }
  for (const auto& r : recvs) ins.push_back(In{peers_[r.from].get(), r});

  auto closedBy = [&](int peer) {
    return PeerFailure(std::string("control ") + what + ": connection to rank " +
                       std::to_string(peer) + " closed (rank " + std::to_string(peer) +
                       " exited, failed or shut down)");
  };
  auto socketError = [&](int peer, int err) {
    return PeerFailure(std::string("control ") + what + ": connection to rank " +
                       std::to_string(peer) + " failed: " + rendezvous::errnoText(err));
  };

  // Returns true when the send is complete; throws on a dead connection.
  auto pushOut = [&](Out& o, int peer) {
    const uint64_t total = sizeof(FrameHeader) + o.header.length;
    while (o.done < total) {
      iovec iov[2];
      int parts = 0;
      if (o.done < sizeof(FrameHeader)) {
        iov[parts++] = {reinterpret_cast<char*>(&o.header) + o.done, sizeof(FrameHeader) - o.done};
        if (o.header.length > 0) iov[parts++] = {const_cast<char*>(o.data), o.header.length};
      } else {
        const uint64_t off = o.done - sizeof(FrameHeader);
        iov[parts++] = {const_cast<char*>(o.data) + off, o.header.length - off};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = parts;
      ssize_t n = ::sendmsg(o.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        o.done += static_cast<uint64_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      if (errno == EPIPE || errno == ECONNRESET) fail(closedBy(peer));
      fail(socketError(peer, errno));
    }
    return true;
  };
  // Returns true when the message is complete; throws on a dead connection
  // or a frame that does not belong here.
  auto pullIn = [&](In& in) {
    const int peer = in.recv.from;
    while (true) {
      char* dst;
      uint64_t want;
      if (in.done < sizeof(FrameHeader)) {
        dst = reinterpret_cast<char*>(&in.header) + in.done;
        want = sizeof(FrameHeader) - in.done;
      } else {
        const uint64_t off = in.done - sizeof(FrameHeader);
        if (off == in.header.length) return true;
        dst = in.dst + off;
        want = in.header.length - off;
      }
      ssize_t n = ::recv(in.fd, dst, want, MSG_DONTWAIT);
      if (n == 0) fail(closedBy(peer));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
        if (errno == ECONNRESET) fail(closedBy(peer));
        fail(socketError(peer, errno));
      }
      const bool headerDone = in.done < sizeof(FrameHeader) &&
                              in.done + static_cast<uint64_t>(n) >= sizeof(FrameHeader);
      in.done += static_cast<uint64_t>(n);
      if (!headerDone) continue;
      const FrameHeader& h = in.header;
      std::string bad;
      if (h.magic != kFrameMagic) {
        bad = "garbled frame";
      } else if (h.sequence != sequence) {
        bad = "message #" + std::to_string(h.sequence) + " where #" + std::to_string(sequence) +
              " was due (ranks are out of step)";
      } else if (h.length > kMaxPayloadBytes) {
        bad = "announced " + std::to_string(h.length) + " bytes";
      } else if (in.recv.expected >= 0 && h.length != static_cast<uint64_t>(in.recv.expected)) {
        bad = std::to_string(h.length) + " bytes where " + std::to_string(in.recv.expected) +
              " were expected";
      }
      if (!bad.empty()) {
        fail(Internal(std::string("control ") + what + ": rank " + std::to_string(peer) +
                      " sent " + bad));
      }
      if (in.recv.expected >= 0) {
        in.dst = in.recv.fixed;
      } else {
        in.recv.grow->resize(h.length);
        in.dst = in.recv.grow->data();
      }
    }
  };

  const auto deadline = rendezvous::deadlineAfter(timeout_);
  std::vector<pollfd> fds;
  std::vector<int> waitingOn;
  while (true) {
    fds.clear();
    waitingOn.clear();
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!pushOut(outs[i], sends[i].to)) {
        fds.push_back({outs[i].fd, POLLOUT, 0});
        waitingOn.push_back(sends[i].to);
      }
    }
    for (auto& in : ins) {
      if (!pullIn(in)) {
        fds.push_back({in.fd, POLLIN, 0});
        waitingOn.push_back(in.recv.from);
      }
    }
    if (fds.empty()) return;
    int n = ::poll(fds.data(), fds.size(),
                   static_cast<int>(std::min<int64_t>(left(deadline).count(), INT_MAX)));
    if (n < 0 && errno != EINTR) fail(socketError(waitingOn.front(), errno));
    if (n == 0 && Clock::now() >= deadline) failTimeout(what, waitingOn);
  }
}

void Mesh::fail(const Error& error) {
  failed_ = true;
  failedByTimeout_ = error.code() == ErrorCode::kTimeout;
  failure_ = error.what();
  // Peers blocked on this rank see the connections close instead of waiting
  // out their own timeout.
  for (auto& fd : peers_) fd.reset();
  if (failedByTimeout_) throw Timeout(failure_);
  if (error.code() == ErrorCode::kInternal) throw Internal(failure_);
  throw PeerFailure(failure_);
}

void Mesh::failTimeout(const char* what, const std::vector<int>& waitingOn) {
  std::vector<int> ranks = waitingOn;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  fail(Timeout(std::string("control ") + what + ": no progress with " + ranksPhrase(ranks) +
               " within " + std::to_string(timeout_.count()) + " ms"));
}

}  // namespace kolo::comm::tcp
