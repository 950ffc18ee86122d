// Thin POSIX socket layer for the TCP store: IPv4 only, non-blocking sockets
// driven by poll(2), every blocking step bounded by a deadline and
// interruptible by a "stop" file descriptor (readable = stop now).
//
// Nothing here throws except listenOn(); I/O reports an IoResult so the
// caller decides what a failure means on its side of the protocol.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kolo::rendezvous {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

constexpr Deadline kNoDeadline = Deadline::max();

// now + timeout, saturating instead of overflowing for huge timeouts.
Deadline deadlineAfter(std::chrono::milliseconds timeout);

// Owns one file descriptor; closes it on destruction. Movable, not copyable.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

enum class IoResult {
  kOk,
  kClosed,    // the peer closed the connection (EOF or reset)
  kTimeout,   // the deadline passed
  kStopped,   // the stop descriptor became readable
  kTooLarge,  // a frame announced more bytes than allowed (frames only)
  kError,     // any other socket error (see errno text in the caller)
};

const char* describe(IoResult result);

// strerror() text for err, thread-safe.
std::string errnoText(int err);

// Binds and listens on host:port (IPv4; "" or "0.0.0.0" = every interface,
// port 0 = ephemeral). Throws kolo::InvalidArgument naming host:port and a
// likely fix when the address cannot be used.
Fd listenOn(const std::string& host, uint16_t port);

// Accepts one pending connection (non-blocking, close-on-exec, TCP_NODELAY)
// or returns an invalid Fd when none is pending (errno EAGAIN) or accept
// failed (errno says why). peer gets "a.b.c.d:port".
Fd acceptOne(int listenFd, std::string* peer);

// One connection attempt to host:port bounded by deadline. On failure
// returns an invalid Fd and a human-readable reason in *error.
Fd connectTo(const std::string& host, uint16_t port, Deadline deadline,
             std::string* error);

// Sends/receives exactly len bytes unless the deadline passes, stopFd
// (ignored when < 0) becomes readable, or the connection fails.
IoResult sendAll(int fd, const void* data, size_t len, Deadline deadline,
                 int stopFd = -1);
IoResult recvAll(int fd, void* data, size_t len, Deadline deadline,
                 int stopFd = -1);

// True when the peer has closed (or reset) the connection. Never blocks and
// never consumes data.
bool peerClosed(int fd);

// Port a socket is bound to (0 on error).
uint16_t localPort(int fd);

// "a.b.c.d" (or "a.b.c.d:port") of the local end of a socket; "" on error.
std::string localAddress(int fd, bool withPort = false);

// A readable-on-demand descriptor used to wake every poll() of a server.
class StopSignal {
 public:
  StopSignal();  // throws kolo::Internal when no descriptor is available
  int fd() const { return fd_.get(); }
  void raise();  // idempotent, thread-safe

 private:
  Fd fd_;
};

}  // namespace kolo::rendezvous
