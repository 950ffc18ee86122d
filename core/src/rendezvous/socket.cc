#include "rendezvous/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "kolo/error.h"

namespace kolo::rendezvous {
namespace {

// strerror_r has two signatures (GNU and XSI); accept either.
[[maybe_unused]] const char* pickMessage(const char* result, const char*) {
  return result;
}
[[maybe_unused]] const char* pickMessage(int, const char* buffer) {
  return buffer;
}

// Milliseconds for poll(): -1 for no deadline, rounded up, capped.
int pollTimeoutMs(Deadline deadline) {
  if (deadline == kNoDeadline) return -1;
  auto now = Clock::now();
  if (now >= deadline) return 0;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
  return left.count() > INT_MAX / 2 ? INT_MAX / 2 : static_cast<int>(left.count());
}

// Waits until fd is ready for events, the deadline passes or stopFd fires.
IoResult waitReady(int fd, short events, Deadline deadline, int stopFd) {
  for (;;) {
    pollfd fds[2] = {{fd, events, 0}, {stopFd, POLLIN, 0}};
    int n = ::poll(fds, stopFd >= 0 ? 2 : 1, pollTimeoutMs(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoResult::kError;
    }
    if (stopFd >= 0 && (fds[1].revents & POLLIN)) return IoResult::kStopped;
    // Errors and hang-ups are left for the next send/recv to report.
    if (fds[0].revents != 0) return IoResult::kOk;
    if (n == 0 && Clock::now() >= deadline) return IoResult::kTimeout;
  }
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string formatAddress(const sockaddr_in& addr, bool withPort) {
  char text[INET_ADDRSTRLEN] = {0};
  if (::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text)) == nullptr) return "";
  std::string out(text);
  if (withPort) out += ":" + std::to_string(ntohs(addr.sin_port));
  return out;
}

// Resolves an IPv4 address for host; "" on success, the reason otherwise.
std::string resolve(const std::string& host, in_addr* out) {
  if (host.empty() || host == "0.0.0.0") {
    out->s_addr = htonl(INADDR_ANY);
    return "";
  }
  if (::inet_pton(AF_INET, host.c_str(), out) == 1) return "";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    return "cannot resolve host '" + host + "': " +
           (rc == EAI_SYSTEM ? errnoText(errno) : ::gai_strerror(rc));
  }
  *out = reinterpret_cast<sockaddr_in*>(result->ai_addr)->sin_addr;
  ::freeaddrinfo(result);
  return "";
}

}  // namespace

Deadline deadlineAfter(std::chrono::milliseconds timeout) {
  auto now = Clock::now();
  if (timeout.count() <= 0) return now;
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(kNoDeadline - now)) {
    return kNoDeadline;
  }
  return now + timeout;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

const char* describe(IoResult result) {
  switch (result) {
    case IoResult::kOk: return "ok";
    case IoResult::kClosed: return "connection closed by peer";
    case IoResult::kTimeout: return "timed out";
    case IoResult::kStopped: return "stopped";
    case IoResult::kTooLarge: return "frame too large";
    case IoResult::kError: return "socket error";
  }
  return "unknown";
}

std::string errnoText(int err) {
  char buffer[256] = {0};
  return pickMessage(::strerror_r(err, buffer, sizeof(buffer)), buffer);
}

Fd listenOn(const std::string& host, uint16_t port) {
  std::string shownHost = host.empty() ? "0.0.0.0" : host;
  std::string where = shownHost + ":" + std::to_string(port);
  auto fail = [&](const std::string& why) {
    return InvalidArgument("rendezvous store cannot listen on " + where + ": " + why);
  };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  std::string error = resolve(host, &addr.sin_addr);
  if (!error.empty()) throw fail(error + "; use an IPv4 address or 0.0.0.0");

  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw fail("socket(): " + errnoText(errno));
  // Lets a restarted job reuse a port still in TIME_WAIT; on Linux it never
  // allows two listeners on one port.
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    std::string portText = std::to_string(port);
    switch (err) {
      case EADDRINUSE:
        throw fail("port " + portText + " on " + shownHost +
                   " is already in use; choose another port "
                   "(KOLO_RENDEZVOUS_PORT) or stop the process holding it");
      case EADDRNOTAVAIL:
        throw fail(shownHost + " is not an address of this machine; "
                   "bind to 0.0.0.0 or to one of this host's addresses");
      case EACCES:
        throw fail("permission denied; ports below 1024 need privileges, "
                   "choose a port above 1024");
      default:
        throw fail(errnoText(err));
    }
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) throw fail("listen(): " + errnoText(errno));
  return fd;
}

Fd acceptOne(int listenFd, std::string* peer) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  for (;;) {
    int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return Fd();
    }
    setNoDelay(fd);
    if (peer != nullptr) *peer = formatAddress(addr, true);
    return Fd(fd);
  }
}

Fd connectTo(const std::string& host, uint16_t port, Deadline deadline,
             std::string* error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  std::string reason = resolve(host.empty() ? "127.0.0.1" : host, &addr.sin_addr);
  if (!reason.empty()) {
    *error = reason;
    return Fd();
  }
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *error = "socket(): " + errnoText(errno);
    return Fd();
  }
  setNoDelay(fd.get());
  int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
    *error = errnoText(errno);
    return Fd();
  }
  if (rc != 0) {
    IoResult ready = waitReady(fd.get(), POLLOUT, deadline, -1);
    if (ready != IoResult::kOk) {
      *error = ready == IoResult::kTimeout ? "connect timed out" : errnoText(errno);
      return Fd();
    }
    int soError = 0;
    socklen_t len = sizeof(soError);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soError, &len);
    if (soError != 0) {
      *error = errnoText(soError);
      return Fd();
    }
  }
  return fd;
}

IoResult sendAll(int fd, const void* data, size_t len, Deadline deadline, int stopFd) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      IoResult ready = waitReady(fd, POLLOUT, deadline, stopFd);
      if (ready != IoResult::kOk) return ready;
      continue;
    }
    return (errno == EPIPE || errno == ECONNRESET) ? IoResult::kClosed : IoResult::kError;
  }
  return IoResult::kOk;
}

IoResult recvAll(int fd, void* data, size_t len, Deadline deadline, int stopFd) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return IoResult::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      IoResult ready = waitReady(fd, POLLIN, deadline, stopFd);
      if (ready != IoResult::kOk) return ready;
      continue;
    }
    return errno == ECONNRESET ? IoResult::kClosed : IoResult::kError;
  }
  return IoResult::kOk;
}

bool peerClosed(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, 0) <= 0) return false;
  char byte;
  ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

std::string localAddress(int fd, bool withPort) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.sin_family != AF_INET) {
    return "";
  }
  return formatAddress(addr, withPort);
}

uint16_t localPort(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  return ntohs(addr.sin_port);
}

StopSignal::StopSignal() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!fd_.valid()) throw Internal("rendezvous store: eventfd(): " + errnoText(errno));
}

void StopSignal::raise() {
  uint64_t one = 1;
  // The counter only grows; the descriptor stays readable once raised.
  [[maybe_unused]] ssize_t n = ::write(fd_.get(), &one, sizeof(one));
}

}  // namespace kolo::rendezvous
