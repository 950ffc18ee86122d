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
#include "rendezvous/arrival.h"
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

std::string addressKey(int rank) { return "addr/" + std::to_string(rank); }

}  // namespace

Mesh::Mesh(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank),
      size_(size),
      timeout_(timeout),
      addresses_(size),
      peers_(size) {}

Mesh::~Mesh() = default;

std::unique_ptr<Mesh> Mesh::connect(const BackendArgs& args, const std::string& what,
                                   const std::vector<int>& neighbours) {
  const int rank = args.identity.rank;
  const int size = args.identity.size;
  KOLO_CHECK_ARG(size >= 1 && rank >= 0 && rank < size,
                 what + ": bad identity rank " + std::to_string(rank) + " of size " +
                     std::to_string(size));
  KOLO_CHECK_ARG(args.store != nullptr, what + ": no rendezvous store");
  KOLO_CHECK_ARG(args.config.timeout.count() > 0, what + ": timeout must be positive");
  std::unique_ptr<Mesh> mesh(new Mesh(rank, size, args.config.timeout));
  mesh->what_ = what;
  mesh->store_ = args.store;
  if (size == 1) return mesh;

  const std::string host = !args.config.iface.empty() ? chooseInterface(args.config.iface).address
                           : args.localAddress.empty() ? "127.0.0.1"
                                                       : args.localAddress;
  try {
    mesh->listener_ = rendezvous::listenOn(host, 0);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(what + ": cannot listen on " + host + " (" + e.what() + ")");
  }
  const std::string address =
      host + ":" + std::to_string(rendezvous::localPort(mesh->listener_.get()));
  if (rank == 0) {
    mesh->token_ = randomToken();
    mesh->haveToken_ = true;
    args.store->set("token", std::vector<char>(mesh->token_.begin(), mesh->token_.end()));
  }
  args.store->set(addressKey(rank), std::vector<char>(address.begin(), address.end()));
  mesh->connectAll(neighbours, rendezvous::deadlineAfter(args.config.timeout));
  return mesh;
}

void Mesh::connectAll(const std::vector<int>& peers, Deadline deadline) {
  connectLower(peers, deadline);
  while (true) {
    std::vector<int> missing;
    for (int peer : peers) {
      if (peer > rank_ && peer < size_ && !peers_[peer].valid()) missing.push_back(peer);
    }
    if (missing.empty()) return;
    pollfd pfd{listener_.get(), POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left(deadline).count(), INT_MAX)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::sort(missing.begin(), missing.end());
      missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
      throw Timeout(what_ + ": " + ranksPhrase(missing) + " did not connect within " +
                    std::to_string(timeout_.count()) + " ms");
    }
    acceptOne(deadline);
  }
}

int Mesh::connectedPeers() const {
  return static_cast<int>(std::count_if(peers_.begin(), peers_.end(),
                                        [](const Fd& fd) { return fd.valid(); }));
}

void Mesh::readAddresses(const std::vector<int>& peers, Deadline deadline) {
  std::vector<int> ranks;
  for (int peer : peers) {
    if (addresses_[peer].second == 0) ranks.push_back(peer);
  }
  std::vector<std::string> keys;
  for (int peer : ranks) keys.push_back(addressKey(peer));
  const bool withToken = !haveToken_;  // rank 0's, read along
  std::vector<int> owners = ranks;
  if (withToken) {
    keys.push_back("token");
    owners.push_back(0);
  }
  std::vector<std::vector<char>> values;
  try {
    values = store_->multiGet(keys, left(deadline));
  } catch (const Timeout&) {
    std::vector<int> missing = rendezvous::ranksWithoutKey(*store_, keys, owners);
    if (missing.empty()) throw;
    std::sort(missing.begin(), missing.end());
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
    throw Timeout(what_ + ": " + rendezvous::notArrived(missing, timeout_));
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    addresses_[ranks[i]] = splitAddress(values[i], ranks[i]);
  }
  if (withToken) setToken(values.back());
}

void Mesh::setToken(const std::vector<char>& bytes) {
  if (bytes.size() != kTokenBytes) throw Internal(what_ + ": malformed job token in the store");
  std::memcpy(token_.data(), bytes.data(), kTokenBytes);
  haveToken_ = true;
}

void Mesh::readToken(Deadline deadline) {
  if (haveToken_) return;
  std::vector<char> bytes;
  try {
    bytes = store_->get("token", left(deadline));
  } catch (const Timeout&) {
    throw Timeout(what_ + ": rank 0 never published the job token within " +
                  std::to_string(timeout_.count()) + " ms");
  }
  setToken(bytes);
}

void Mesh::connectLower(const std::vector<int>& peers, Deadline deadline) {
  std::vector<int> lower;
  for (int peer : peers) {
    if (peer < rank_ && !peers_[peer].valid() &&
        std::find(lower.begin(), lower.end(), peer) == lower.end()) {
      lower.push_back(peer);
    }
  }
  if (lower.empty()) return;
  std::sort(lower.begin(), lower.end());
  readAddresses(lower, deadline);
  for (int peer : lower) {
    const auto& [peerHost, peerPort] = addresses_[peer];
    std::string error;
    Fd fd = rendezvous::connectTo(peerHost, peerPort, deadline, &error);
    if (!fd.valid()) {
      throw PeerFailure(what_ + ": cannot connect to rank " + std::to_string(peer) + " at " +
                        peerHost + ":" + std::to_string(peerPort) + ": " + error);
    }
    Hello hello{kHelloMagic, kVersion, static_cast<uint32_t>(rank_), static_cast<uint32_t>(peer),
                static_cast<uint32_t>(size_), token_};
    Ack ack{};
    IoResult io = rendezvous::sendAll(fd.get(), &hello, sizeof(hello), deadline);
    if (io == IoResult::kOk) io = rendezvous::recvAll(fd.get(), &ack, sizeof(ack), deadline);
    if (io == IoResult::kTimeout) {
      throw Timeout(what_ + ": rank " + std::to_string(peer) + " did not answer within " +
                    std::to_string(timeout_.count()) + " ms");
    }
    if (io != IoResult::kOk) {
      throw PeerFailure(what_ + ": rank " + std::to_string(peer) +
                        " closed the connection before answering (" + rendezvous::describe(io) +
                        "; it exited or failed, or another job uses the same rendezvous)");
    }
    if (ack.magic != kAckMagic || ack.from != static_cast<uint32_t>(peer)) {
      throw PeerFailure(what_ + ": rank " + std::to_string(peer) +
                        "'s address answered as another program (is another job using the "
                        "same rendezvous?)");
    }
    peers_[peer] = std::move(fd);
  }
}

void Mesh::acceptOne(Deadline deadline) {
  Fd fd = rendezvous::acceptOne(listener_.get(), nullptr);
  if (!fd.valid()) return;
  readToken(deadline);
  std::string why;
  int from = readHello(fd.get(), rank_, size_, token_, deadline, &why);
  if (from < 0 || peers_[from].valid()) return;  // dropped: fd closes here
  Ack ack{kAckMagic, static_cast<uint32_t>(rank_)};
  if (rendezvous::sendAll(fd.get(), &ack, sizeof(ack), deadline) != IoResult::kOk) return;
  peers_[from] = std::move(fd);
}

void Mesh::transfer(const char* what, std::vector<Send> sends, std::vector<Recv> recvs) {
  if (failed_) {
    const std::string message = std::string("control ") + what +
                                " failed: backend unusable after an earlier failure: " + failure_;
    if (failedByTimeout_) throw Timeout(message);
    throw PeerFailure(message);
  }
  const auto deadline = rendezvous::deadlineAfter(timeout_);
  // Every step after the first finds its peers connected: no allocation then.
  auto unconnectedLower = [&](int peer) { return peer < rank_ && !peers_[peer].valid(); };
  bool connecting = false;
  for (const auto& send : sends) connecting = connecting || unconnectedLower(send.to);
  for (const auto& recv : recvs) connecting = connecting || unconnectedLower(recv.from);
  if (connecting) {
    std::vector<int> named;
    for (const auto& send : sends) named.push_back(send.to);
    for (const auto& recv : recvs) named.push_back(recv.from);
    try {
      connectLower(named, deadline);
    } catch (const Error& e) {
      fail(e);
    }
  }

  struct Out {
    int peer;
    FrameHeader header;
    const char* data;
    uint64_t done = 0;  // bytes of header + data sent
  };
  struct In {
    Recv recv;
    uint32_t sequence;
    FrameHeader header{};
    uint64_t done = 0;  // bytes of header + data received
    char* dst = nullptr;
  };
  std::vector<Out> outs;
  std::vector<In> ins;
  outs.reserve(sends.size());
  ins.reserve(recvs.size());
  for (const auto& s : sends) {
    outs.push_back(Out{s.to, FrameHeader{kFrameMagic, operation_, s.length}, s.data});
  }
  for (const auto& r : recvs) ins.push_back(In{r, operation_});

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
  auto pushOut = [&](Out& o) {
    const int peer = o.peer;
    const int fd = peers_[peer].get();
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
      ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
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
    const int fd = peers_[peer].get();
    const uint32_t sequence = in.sequence;
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
      ssize_t n = ::recv(fd, dst, want, MSG_DONTWAIT);
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

  std::vector<pollfd> fds;
  std::vector<int> waitingOn;
  std::vector<int> unconnected;  // higher ranks this transfer waits to connect
  while (true) {
    fds.clear();
    waitingOn.clear();
    unconnected.clear();
    for (auto& out : outs) {
      if (!peers_[out.peer].valid()) {
        unconnected.push_back(out.peer);
      } else if (!pushOut(out)) {
        fds.push_back({peers_[out.peer].get(), POLLOUT, 0});
        waitingOn.push_back(out.peer);
      }
    }
    for (auto& in : ins) {
      if (!peers_[in.recv.from].valid()) {
        unconnected.push_back(in.recv.from);
      } else if (!pullIn(in)) {
        fds.push_back({peers_[in.recv.from].get(), POLLIN, 0});
        waitingOn.push_back(in.recv.from);
      }
    }
    if (fds.empty() && unconnected.empty()) return;
    // Always accept: a peer that connects for this or a later transfer
    // waits for the answer.
    fds.push_back({listener_.get(), POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(),
                   static_cast<int>(std::min<int64_t>(left(deadline).count(), INT_MAX)));
    if (n < 0 && errno != EINTR) {
      fail(socketError(waitingOn.empty() ? unconnected.front() : waitingOn.front(), errno));
    }
    if (n > 0 && (fds.back().revents & POLLIN) != 0) {
      try {
        acceptOne(deadline);
      } catch (const Error& e) {
        fail(e);
      }
    }
    if (n == 0 && Clock::now() >= deadline) failTimeout(what, waitingOn, unconnected);
  }
}

void Mesh::abandon(const std::string& why) noexcept {
  if (failed_) return;
  failed_ = true;
  failure_ = why;
  // Peers blocked on this rank see the connections close instead of waiting
  // out their own timeout.
  for (auto& fd : peers_) fd.reset();
  listener_.reset();
}

void Mesh::fail(const Error& error) {
  if (!failed_) failedByTimeout_ = error.code() == ErrorCode::kTimeout;
  abandon(error.what());
  if (error.code() == ErrorCode::kTimeout) throw Timeout(error.what());
  if (error.code() == ErrorCode::kInternal) throw Internal(error.what());
  throw PeerFailure(error.what());
}

void Mesh::failTimeout(const char* what, const std::vector<int>& waitingOn,
                       const std::vector<int>& neverConnected) {
  auto sorted = [](std::vector<int> ranks) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return ranks;
  };
  std::string text = std::string("control ") + what + ": ";
  if (!waitingOn.empty()) text += "no progress with " + ranksPhrase(sorted(waitingOn));
  if (!neverConnected.empty()) {
    if (!waitingOn.empty()) text += "; ";
    text += ranksPhrase(sorted(neverConnected)) + " never connected";
  }
  fail(Timeout(text + " within " + std::to_string(timeout_.count()) + " ms"));
}

}  // namespace kolo::comm::tcp
