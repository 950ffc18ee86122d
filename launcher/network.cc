#include "network.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "comm/tcp/interfaces.h"
#include "hosts.h"
#include "kolo/error.h"
#include "usage_error.h"

namespace kolo::launcher {

RendezvousEndpoint chooseRendezvous(const std::vector<std::string>& remoteHosts,
                                    const std::string& ifaces) {
  if (remoteHosts.empty()) {
    // Loopback only; --network-interface still reaches workers as KOLO_IFACE.
    return {"127.0.0.1", "127.0.0.1"};
  }
  if (!ifaces.empty()) return {"0.0.0.0", interfaceAddress(ifaces)};
  return {"0.0.0.0", routeSourceAddress(remoteHosts.front())};
}

std::string interfaceAddress(const std::string& ifaces) {
  std::map<std::string, std::string> here;  // name -> its first IPv4 address
  std::vector<std::string> names;
  try {
    here = comm::tcp::ipv4Interfaces();
    names = comm::tcp::interfaceNames(ifaces);
  } catch (const InvalidArgument& e) {
    throw UsageError(e.what());
  }
  for (const auto& name : names) {
    if (auto it = here.find(name); it != here.end()) return it->second;
  }
  std::string known;
  for (const auto& [name, address] : here) known += (known.empty() ? "" : ", ") + name;
  const bool several = names.size() > 1;
  throw UsageError((several ? "--network-interfaces " : "--network-interface ") + ifaces +
                   (several ? ": none of these interfaces has an IPv4 address on this host"
                            : ": no such interface with an IPv4 address on this host") +
                   "; interfaces here: " + known);
}

std::string routeSourceAddress(const std::string& host) {
  std::string name = networkName(host);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(name.c_str(), "9", &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw UsageError("cannot resolve host '" + name + "' (" + gai_strerror(rc) +
                     "); check the host name, or pass --network-interface");
  }
  std::string out;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
      out = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (out.empty() || out == "0.0.0.0") {
    throw UsageError("no route to host '" + name +
                     "'; check the network, or pass --network-interface");
  }
  return out;
}

uint16_t freeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  const int err = errno;
  if (fd >= 0) close(fd);
  if (port == 0) throw UsageError(std::string("no free TCP port for MASTER_PORT: ") + strerror(err));
  return port;
}

std::string randomSecret() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed: no secret for the job");
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::unique_ptr<TcpStoreServer> serveRendezvous(const RendezvousEndpoint& endpoint, int port,
                                                const std::string& secret) {
  try {
    return std::make_unique<TcpStoreServer>(endpoint.bindHost, static_cast<uint16_t>(port), secret);
  } catch (const std::exception& e) {
    throw UsageError("cannot serve the rendezvous store on " + endpoint.bindHost + ":" +
                     std::to_string(port) + " (" + e.what() + ")" +
                     (port != 0 ? "; choose another --port or leave it out" : ""));
  }
}

}  // namespace kolo::launcher
