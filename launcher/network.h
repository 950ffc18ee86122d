// Where workers reach kolorun's rendezvous store, and the job's secret.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kolo/tcp_store.h"

namespace kolo::launcher {

struct RendezvousEndpoint {
  std::string bindHost;  // what the store listens on
  std::string addr;      // what workers are told (KOLO_RENDEZVOUS_ADDR)
};

// 127.0.0.1 when every host is this machine; otherwise listen everywhere and
// tell workers the IPv4 address of the first interface of `ifaces` (names
// separated by commas) that this host has, else the source address of the
// route to the first remote host. Throws UsageError.
RendezvousEndpoint chooseRendezvous(const std::vector<std::string>& remoteHosts,
                                    const std::string& ifaces);

// IPv4 address of the first interface of `ifaces` (names separated by
// commas) that this host has; UsageError naming the interfaces that exist
// when it has none of them.
std::string interfaceAddress(const std::string& ifaces);

// Local address the kernel would use to reach host (a UDP connect() sends
// nothing). UsageError when host does not resolve or has no route.
std::string routeSourceAddress(const std::string& host);

// A TCP port free on every interface of this machine now (the kernel's
// pick for port 0); throws UsageError when none can be bound.
uint16_t freeTcpPort();

// 32 random bytes from OpenSSL, hex-encoded.
std::string randomSecret();

// The job's store on endpoint.bindHost:port (0: any free port). UsageError
// naming the address when it cannot be served.
std::unique_ptr<TcpStoreServer> serveRendezvous(const RendezvousEndpoint& endpoint, int port,
                                                const std::string& secret);

}  // namespace kolo::launcher
